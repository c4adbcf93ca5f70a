-- push.lua: create a job, or replace the job with the same id in whatever
-- state it is (delay, ready or reserved), atomically.
-- KEYS[1] job hash, KEYS[2] the job's bucket, KEYS[3] the topic's ready list,
-- KEYS[4] the topic's wake-up list.
-- ARGV[1] id, ARGV[2] topic, ARGV[3] delay in ms, ARGV[4] ttr in s,
-- ARGV[5] body, ARGV[6] bucket number, ARGV[7]/ARGV[8] bucket key prefix and
-- suffix (to find a previous bucket), ARGV[9] wake-up token cap.
-- Reply: {due ms, now ms, replaced (0/1)}.
-- A replaced job keeps no stale copy: its old bucket entry is removed, and an
-- old ready-list entry is skipped by claim because it checks the state and the
-- topic of the job it pops.
local job, bucket, ready, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, topic = ARGV[1], ARGV[2]
local delay_ms, ttr = tonumber(ARGV[3]), ARGV[4]
local bucket_no = ARGV[6]

local us = now_us()
local now = math.floor(us / 1000)
local due = math.ceil(us / 1000) + delay_ms

local old = redis.call('HMGET', job, 's', 'k')
local replaced = 0
if old[1] then
  replaced = 1
  if old[2] and old[2] ~= bucket_no then
    redis.call('ZREM', ARGV[7] .. old[2] .. ARGV[8], id)
  end
  redis.call('DEL', job)
end

local state = 'delay'
if delay_ms == 0 then
  state = 'ready'
end
redis.call('HSET', job, 't', topic, 's', state, 'd', int(due), 'r', ttr,
  'a', '0', 'c', int(now), 'k', bucket_no)
write_body(job, ARGV[5])

if state == 'ready' then
  redis.call('ZREM', bucket, id)
  redis.call('RPUSH', ready, id)
  signal(wake, 1, tonumber(ARGV[9]))
else
  redis.call('ZADD', bucket, int(due), id)
end
return {due, now, replaced}
