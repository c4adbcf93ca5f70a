-- lib: remove held
-- finish.lua: consumers are done with jobs: remove every trace of them. A
-- dead-lettered job is refused: it left the delivery cycle, and only
-- delete or a kick changes it.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] ids.
-- Reply: per id, a status (1 finished, 0 unknown, -1 dead-lettered: left
-- alone) and the job's topic ('' when unknown).
--
-- With a delivery's receipt, for one job: ARGV[ARG] '' (no id is empty),
-- ARGV[ARG+1] the id, ARGV[ARG+2] the delivery's attempt number, and
-- optionally ARGV[ARG+3] the job's creation time in ms as the delivery
-- knew it (a webhook dispatcher's). The job is finished only while that
-- delivery holds it. Reply: {status, state or
-- '', topic or 0}: status 1 finished, or held_delivery's refusal (0
-- unknown id, -1 not reserved, -2 stale delivery), the job left alone.
-- (The ids form, the hot path, pays for it one comparison and the
-- definition of held_delivery.)
if ARGV[ARG] == '' then
  local id = ARGV[ARG + 1]
  local job, refusal = held_delivery(id, ARGV[ARG + 2], ARGV[ARG + 3])
  if refusal then
    return refusal
  end
  remove(id, job)
  flush()
  return {1, 'reserved', job.topic}
end
return remove_jobs(ARG, true)
