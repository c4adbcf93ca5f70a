-- import.lua: convert one job the original ouqiang/delay-queue server left in
-- Redis (a raw-id key holding msgpack, decoded by the server) into the new
-- layout, atomically.
-- KEYS[1] the original's raw job key, KEYS[2] the original bucket holding it
-- (mode "bucket").
-- ARGV[ARG] id, ARGV[ARG+1] the raw value the server decoded, ARGV[ARG+2]
-- topic, ARGV[ARG+3] first due ms (for Get), ARGV[ARG+4] ttr s,
-- ARGV[ARG+5] body, ARGV[ARG+6] bucket number, ARGV[ARG+7] mode: "bucket"
-- (scheduled at ARGV[ARG+8] ms) or "ready" (its id already sits in the
-- topic's ready list).
-- Reply: 1 imported, 0 already in the new layout, -1 the raw value changed.
local raw, old_bucket = KEYS[1], KEYS[2]
local id, topic = ARGV[ARG], ARGV[ARG + 2]
local job = job_key(id)
if redis.call('EXISTS', job) == 1 then
  return 0
end
if redis.call('GET', raw) ~= ARGV[ARG + 1] then
  return -1
end
local state = 'delay'
if ARGV[ARG + 7] == 'ready' then
  state = 'ready'
end
local fields = {'t', topic, 's', state, 'd', ARGV[ARG + 3], 'r', ARGV[ARG + 4],
  'a', '0', 'c', int(now_ms()), 'k', ARGV[ARG + 6]}
body_fields(fields, #fields, ARGV[ARG + 5])
redis.call('HSET', job, unpack(fields))
count(topic, state, 1)
if state == 'delay' then
  redis.call('ZREM', old_bucket, id)
  redis.call('ZADD', bucket_key(ARGV[ARG + 6]), ARGV[ARG + 8], id)
else
  signal(topic, 1)
end
redis.call('DEL', raw)
return 1
