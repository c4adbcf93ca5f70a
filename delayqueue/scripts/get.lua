-- lib: view
-- get.lua: read jobs, for /get and the dead-letter pages.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] ids.
-- Reply: per id, its view (see lib.lua, section view), or an empty list when there
-- is no such job.
local reply = {}
for i = ARG, #ARGV do
  local job = get(ARGV[i])
  if job then
    reply[#reply + 1] = view(ARGV[i], job)
  else
    reply[#reply + 1] = {}
  end
end
return reply
