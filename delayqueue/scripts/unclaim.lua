-- lib: ready held
-- unclaim.lua: give back a delivery that could not be handed to a live
-- consumer (it left while the job was claimed for it): the job is ready
-- again at once, in the place it had, and the delivery is not counted.
-- KEYS: the partition's (see lib.lua, section record), then the wake-up list of the
-- job's topic (none for a webhook job: its dispatchers are woken through
-- hookwake).
-- ARGV[ARG] id, ARGV[ARG+1] the attempts value of that delivery, and
-- optionally ARGV[ARG+2] the job's creation time in ms as the delivery
-- knew it (a webhook dispatcher's: a job pushed again since counts its
-- attempts from 1 again): see held_delivery.
-- Reply: 1 given back, 0 the job had moved on (finished, re-pushed...).
local id = ARGV[ARG]
local job, refusal = held_delivery(id, ARGV[ARG + 1], ARGV[ARG + 2])
if refusal then
  return 0
end
local pos = extra(job).q
if pos == '0' then
  pos = ready_position()
end
job.a = job.a - 1
job.q = '0'
move(id, job, 'ready', pos)
if has_callback(job) then
  signal(nil, 1)
else
  signal(job.topic, 1)
end
flush()
return 1
