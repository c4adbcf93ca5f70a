-- movedue.lua: handle up to a batch of due entries of one bucket,
-- atomically: a delayed job whose time has come becomes ready; a reserved job
-- whose lease ran out ends that delivery as failed (ready again, scheduled by
-- its retry schedule, or dead-lettered when its attempts are used up).
-- KEYS[1] the bucket.
-- ARGV[ARG] batch size.
-- Reply: {entries handled, next due ms or -1, now ms, oldest due ms handled
-- or -1, then per expired lease: its topic and the job's new state}.
local bucket = KEYS[1]
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', bucket, '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[ARG]))
local ids = {}
for i = 1, #due, 2 do
  ids[#ids + 1] = due[i]
end
if #ids > 0 then
  -- Removed first: a failed delivery may be scheduled again in this bucket.
  redis.call('ZREM', bucket, unpack(ids))
end
local moved = {}
local order = {}
local oldest = -1
local expired = {}
for i = 1, #due, 2 do
  local id = due[i]
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'cb')
  if oldest < 0 then
    oldest = tonumber(due[i + 1])
  end
  if f[1] == 'delay' and f[3] then
    set_state(job, f[2], 'delay', 'ready')
    make_ready(id, job, f[2], false)
  elseif f[1] == 'delay' then
    -- Counted per topic after the loop.
    redis.call('HSET', job, 's', 'ready')
    redis.call('RPUSH', ready_key(f[2]), id)
    if not moved[f[2]] then
      moved[f[2]] = 0
      order[#order + 1] = f[2]
    end
    moved[f[2]] = moved[f[2]] + 1
  elseif f[1] == 'reserved' then
    expired[#expired + 1] = f[2]
    expired[#expired + 1] = fail_delivery(id, job, 'ttr-expired', tonumber(due[i + 1]), nil, now)
  end
end
for _, topic in ipairs(order) do
  count(topic, 'ready', moved[topic])
  count(topic, 'delay', -moved[topic])
  signal(topic, moved[topic])
end
local next_due = -1
local first = redis.call('ZRANGE', bucket, 0, 0, 'WITHSCORES')
if first[2] then
  next_due = tonumber(first[2])
end
local reply = {#ids, next_due, now, oldest}
for _, v in ipairs(expired) do
  reply[#reply + 1] = v
end
return reply
