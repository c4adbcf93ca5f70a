-- unclaim.lua: give back a delivery that could not be handed to a live
-- consumer (it left while the job was claimed for it): the job is ready
-- again at once, at the head of its list, and the delivery is not counted.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] id, ARGV[ARG+1] the attempts value of that delivery.
-- Reply: 1 given back, 0 the job had moved on (finished, re-pushed...).
local id = ARGV[ARG]
local job = job_key(id)
local f = redis.call('HMGET', job, 's', 'a', 'k', 't')
if f[1] ~= 'reserved' or f[2] ~= ARGV[ARG + 1] then
  return 0
end
redis.call('ZREM', bucket_key(f[3]), id)
set_state(job, f[4], 'reserved', 'ready')
redis.call('HSET', job, 'a', int(tonumber(f[2]) - 1))
redis.call('HDEL', job, 'l')
make_ready(id, job, f[4], true)
return 1
