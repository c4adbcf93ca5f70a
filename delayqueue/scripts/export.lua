-- lib:
-- export.lua: read jobs whole, to move them to another partition (a change
-- of the partition count, see adopt.lua).
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] ids.
-- Reply: per id, {record, body}, or an empty list when there is no such
-- job.
local reply = {}
for i = ARG, #ARGV do
  local id = ARGV[i]
  local raw = redis.call('HGET', KEYS[1], id)
  local job = decode(raw)
  if job then
    reply[#reply + 1] = {raw, body_of(id, job)}
  else
    reply[#reply + 1] = {}
  end
end
return reply
