-- touch.lua: extend a reserved job's lease to now + ttr, for long work.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] id, ARGV[ARG+1] the delivery's attempt number (0: not checked).
-- Reply: {status, state or '', lease end ms}: status 1 touched, 0 unknown
-- id, -1 not reserved (state given), -2 stale delivery.
local id = ARGV[ARG]
local job = job_key(id)
local f, refusal = held_delivery(job, ARGV[ARG + 1], 's', 'a', 'k', 'r')
if refusal then
  return refusal
end
local lease = now_ms() + tonumber(f[4]) * 1000
redis.call('HSET', job, 'l', int(lease))
redis.call('ZADD', bucket_key(f[3]), int(lease), id)
return {1, 'reserved', lease}
