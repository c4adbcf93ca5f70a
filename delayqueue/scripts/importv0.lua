-- lib: ready
-- importv0.lua: convert one job the original ouqiang/delay-queue server left
-- in Redis (a raw-id key holding msgpack, decoded by the server) into the
-- current layout, atomically. It touches the original's keys as well as a
-- partition's: it runs on one Redis only, before the engine starts.
-- KEYS: the partition's (see lib.lua, section record), then KEYS[11] the original's raw job
-- key, KEYS[12] the original bucket holding it (mode "bucket"), KEYS[13]
-- the original ready list holding it (mode "ready").
-- ARGV[ARG] id, ARGV[ARG+1] the raw value the server decoded, ARGV[ARG+2]
-- topic, ARGV[ARG+3] first due ms (for Get), ARGV[ARG+4] ttr s,
-- ARGV[ARG+5] body, ARGV[ARG+6] mode: "bucket" (scheduled at ARGV[ARG+7]
-- ms) or "ready".
-- Reply: 1 imported, 0 already in the current layout, -1 the raw value
-- changed.
local raw, old_bucket, old_ready = KEYS[11], KEYS[12], KEYS[13]
local id, topic = ARGV[ARG], ARGV[ARG + 2]
if get(id) then
  return 0
end
if redis.call('GET', raw) ~= ARGV[ARG + 1] then
  return -1
end
local now = clock()
local job = {a = 0, d = ARGV[ARG + 3], r = ARGV[ARG + 4], c = int(now), m = '0', q = '0', dt = '0', ls = '0',
  dr = '', le = '', lb = '', topic = topic, retry = '', cb = ''}
if ARGV[ARG + 6] == 'ready' then
  job.s, job.x = 'ready', ready_position()
  signal(topic, 1)
  redis.call('LREM', old_ready, 0, id)
else
  job.s, job.x = 'delay', time13(tonumber(ARGV[ARG + 7]))
  redis.call('ZREM', old_bucket, id)
end
create(id, job, ARGV[ARG + 5])
flush()
redis.call('DEL', raw)
return 1
