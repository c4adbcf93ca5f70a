-- lib: ready
-- adopt.lua: store jobs read from another partition (export.lua) in this
-- one, in the state they had, unless this partition has them already (a
-- move interrupted half-way and run again). The caller then deletes them
-- from the partition they came from.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] per job: id, record, body.
-- Reply: the jobs stored.
local stored = 0
for i = ARG, #ARGV, 3 do
  local id = ARGV[i]
  local job = decode(ARGV[i + 1])
  if job and not get(id) then
    if job.s == 'ready' then
      -- Its place in the other partition's order means nothing here.
      job.x = ready_position()
    end
    tail(job)
    extra(job).q = '0'
    -- Written anew, its tail with it: its body may move into or out of
    -- BODIES.
    job.rawtail = nil
    create(id, job, ARGV[i + 2])
    stored = stored + 1
  end
end
flush()
return stored
