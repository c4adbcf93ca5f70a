-- delete.lua: remove a job in any state.
-- KEYS[1] job hash.
-- ARGV[1] id, ARGV[2]/ARGV[3] bucket key prefix and suffix.
-- Reply: 1 if the job existed, 0 otherwise. A ready-list entry left behind is
-- dropped by claim, which finds no job for it.
local job = KEYS[1]
local f = redis.call('HMGET', job, 's', 'k')
if not f[1] then
  return 0
end
if f[1] ~= 'ready' then
  redis.call('ZREM', ARGV[2] .. f[2] .. ARGV[3], ARGV[1])
end
redis.call('DEL', job)
return 1
