-- lib: remove
-- delete.lua: remove jobs in any state, dead letters included.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] ids.
-- Reply: per id, a status (1 deleted, 0 unknown) and the job's topic (''
-- when unknown).
return remove_jobs(ARG, false)
