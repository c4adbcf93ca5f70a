-- movedue.lua: move up to a batch of due ids from one bucket to their topics'
-- ready lists, atomically. A due id is a delayed job whose time has come or a
-- reserved job whose lease ran out (a redelivery).
-- KEYS[1] the bucket.
-- ARGV[1] batch size, ARGV[2] job key prefix, ARGV[3]/ARGV[4] ready list key
-- prefix and suffix, ARGV[5]/ARGV[6] wake-up list key prefix and suffix,
-- ARGV[7] wake-up token cap.
-- Reply: {moved, next due ms or -1, now ms, oldest due ms moved or -1}.
local bucket = KEYS[1]
local prefix = ARGV[2]
local us = now_us()
local now = math.floor(us / 1000)

local due = redis.call('ZRANGEBYSCORE', bucket, '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local count = #due / 2
local per_topic = {}
local topics = {}
local moved = 0
local oldest = -1
for i = 1, #due, 2 do
  local id = due[i]
  local job = prefix .. id
  local f = redis.call('HMGET', job, 's', 't')
  if f[1] == 'delay' or f[1] == 'reserved' then
    redis.call('HSET', job, 's', 'ready')
    redis.call('HDEL', job, 'l')
    redis.call('RPUSH', ARGV[3] .. f[2] .. ARGV[4], id)
    if not per_topic[f[2]] then
      per_topic[f[2]] = 0
      topics[#topics + 1] = f[2]
    end
    per_topic[f[2]] = per_topic[f[2]] + 1
    moved = moved + 1
    if oldest < 0 then
      oldest = tonumber(due[i + 1])
    end
  end
end
if count > 0 then
  redis.call('ZREMRANGEBYRANK', bucket, 0, count - 1)
end
local cap = tonumber(ARGV[7])
for _, topic in ipairs(topics) do
  signal(ARGV[5] .. topic .. ARGV[6], per_topic[topic], cap)
end

local next_due = -1
local first = redis.call('ZRANGE', bucket, 0, 0, 'WITHSCORES')
if first[2] then
  next_due = tonumber(first[2])
end
return {count, next_due, now, oldest}
