-- import.lua: convert one job the original ouqiang/delay-queue server left in
-- Redis (a raw-id key holding msgpack, decoded by the server) into the new
-- layout, atomically.
-- KEYS[1] the original's raw job key, KEYS[2] the new job hash, KEYS[3] the
-- job's new bucket, KEYS[4] the original bucket holding it (mode "bucket"),
-- KEYS[5] the topic's ready list, KEYS[6] its wake-up list.
-- ARGV[1] id, ARGV[2] the raw value the server decoded, ARGV[3] topic,
-- ARGV[4] first due ms (for Get), ARGV[5] ttr s, ARGV[6] body, ARGV[7] bucket
-- number, ARGV[8] mode: "bucket" (scheduled at ARGV[9] ms) or "ready" (its id
-- already sits in the ready list KEYS[5]), ARGV[9] scheduled ms,
-- ARGV[10] wake-up token cap.
-- Reply: 1 imported, 0 already in the new layout, -1 the raw value changed.
local raw, job = KEYS[1], KEYS[2]
local id = ARGV[1]
if redis.call('EXISTS', job) == 1 then
  return 0
end
if redis.call('GET', raw) ~= ARGV[2] then
  return -1
end
local now = math.floor(now_us() / 1000)
local state = 'delay'
if ARGV[8] == 'ready' then
  state = 'ready'
end
redis.call('HSET', job, 't', ARGV[3], 's', state, 'd', ARGV[4], 'r', ARGV[5],
  'a', '0', 'c', int(now), 'k', ARGV[7])
write_body(job, ARGV[6])
if state == 'delay' then
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZADD', KEYS[3], ARGV[9], id)
else
  signal(KEYS[6], 1, tonumber(ARGV[10]))
end
redis.call('DEL', raw)
return 1
