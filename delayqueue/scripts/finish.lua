-- finish.lua: consumers are done with jobs: remove every trace of them. A
-- dead-lettered job is refused: it left the delivery cycle, and only
-- delete or a kick changes it.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG..] ids.
-- Reply: per id, 1 finished, 0 unknown, -1 dead-lettered (left alone).
local reply = {}
for i = ARG, #ARGV do
  local id = ARGV[i]
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'k')
  if not f[1] then
    reply[#reply + 1] = 0
  elseif f[1] == 'dead' then
    reply[#reply + 1] = -1
  else
    remove_job(id, job, f[2], f[1], f[3])
    reply[#reply + 1] = 1
  end
end
return reply
