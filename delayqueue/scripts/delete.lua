-- delete.lua: remove jobs in any state, dead letters included.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG..] ids.
-- Reply: per id, a status (1 deleted, 0 unknown) and the job's topic ('' when
-- unknown).
local reply = {}
-- Counters are summed over the ids and applied once.
local tally = new_tally()
local counter = tally_counter(tally)
for i = ARG, #ARGV do
  local id = ARGV[i]
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'k')
  local status = 0
  if f[1] then
    remove_job(id, job, f[2], f[1], f[3], counter)
    status = 1
  end
  reply[#reply + 1] = status
  reply[#reply + 1] = f[2] or ''
end
apply_tally(tally)
return reply
