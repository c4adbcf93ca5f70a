-- lib: remove
-- finish.lua: consumers are done with jobs: remove every trace of them. A
-- dead-lettered job is refused: it left the delivery cycle, and only
-- delete or a kick changes it.
-- KEYS: the partition's (see lib/record.lua).
-- ARGV[ARG..] ids.
-- Reply: per id, a status (1 finished, 0 unknown, -1 dead-lettered: left
-- alone) and the job's topic ('' when unknown).
return remove_jobs(ARG, true)
