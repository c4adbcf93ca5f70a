-- finish.lua: consumers are done with jobs: remove every trace of them. A
-- dead-lettered job is refused: it left the delivery cycle, and only
-- delete or a kick changes it.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG..] ids.
-- Reply: per id, a status (1 finished, 0 unknown, -1 dead-lettered: left
-- alone) and the job's topic ('' when unknown).
local reply = {}
-- Counters are summed over the ids and applied once.
local tally = new_tally()
local counter = tally_counter(tally)
for i = ARG, #ARGV do
  local id = ARGV[i]
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'k')
  local status = 0
  if f[1] == 'dead' then
    status = -1
  elseif f[1] then
    remove_job(id, job, f[2], f[1], f[3], counter)
    status = 1
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = f[2] or ''
end
apply_tally(tally)
return reply
