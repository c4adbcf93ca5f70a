-- delete.lua: remove jobs in any state, dead letters included.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG..] ids.
-- Reply: per id, 1 deleted, 0 unknown.
local reply = {}
for i = ARG, #ARGV do
  local id = ARGV[i]
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'k')
  if f[1] then
    remove_job(id, job, f[2], f[1], f[3])
    reply[#reply + 1] = 1
  else
    reply[#reply + 1] = 0
  end
end
return reply
