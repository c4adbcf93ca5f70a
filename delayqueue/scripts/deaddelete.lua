-- lib: dead
-- deaddelete.lua: delete dead letters of a topic: the ids given, or (none
-- given) a batch of the oldest; the server calls it again until none are
-- left.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG] topic, ARGV[ARG+1] batch size, ARGV[ARG+2..] ids.
-- Reply: the number deleted.
local topic = ARGV[ARG]
local ids = {unpack(ARGV, ARG + 2)}
if #ids == 0 then
  ids = dead_ids(topic, tonumber(ARGV[ARG + 1]))
end
get_many(ids)
local deleted = 0
for _, id in ipairs(ids) do
  local job = get(id)
  if job and job.s == 'dead' and job.topic == topic then
    remove(id, job)
    deleted = deleted + 1
  end
end
flush()
return deleted
