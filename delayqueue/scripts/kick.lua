-- lib: ready
-- kick.lua: send dead letters of a topic back to ready, attempts reset.
-- KEYS: the partition's (see lib.lua, section record), then the topic's wake-up list.
-- ARGV[ARG] topic, ARGV[ARG+1..] ids (the server picks the oldest of every
-- partition's).
-- Reply: the ids kicked.
local topic = ARGV[ARG]
local ids = {unpack(ARGV, ARG + 1)}
get_many(ids)
local kicked = {}
for _, id in ipairs(ids) do
  local job = get(id)
  if job and job.s == 'dead' and job.topic == topic then
    extra(job)
    job.a, job.dr, job.dt, job.ls, job.le, job.lb = 0, '', '0', '0', '', ''
    make_ready(id, job)
    kicked[#kicked + 1] = id
  end
end
flush()
return kicked
