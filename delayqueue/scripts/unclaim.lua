-- unclaim.lua: give back a delivery that could not be handed to a live
-- consumer (it left while the job was being claimed for it): the job is
-- ready again at once, at the head of its list, and the delivery is not
-- counted.
-- KEYS[1] job hash, KEYS[2] the topic's ready list, KEYS[3] its wake-up list.
-- ARGV[1] id, ARGV[2] the attempts value of that delivery,
-- ARGV[3]/ARGV[4] bucket key prefix and suffix, ARGV[5] wake-up token cap.
-- Reply: 1 if given back, 0 if the job had moved on (finished, re-pushed...).
local job = KEYS[1]
local f = redis.call('HMGET', job, 's', 'a', 'k')
if f[1] ~= 'reserved' or f[2] ~= ARGV[2] then
  return 0
end
redis.call('ZREM', ARGV[3] .. f[3] .. ARGV[4], ARGV[1])
redis.call('HSET', job, 's', 'ready', 'a', int(tonumber(f[2]) - 1))
redis.call('HDEL', job, 'l')
redis.call('LPUSH', KEYS[2], ARGV[1])
signal(KEYS[3], 1, tonumber(ARGV[5]))
return 1
