-- deaddelete.lua: delete dead letters of a topic: one id, or a batch of the
-- oldest (the server calls it again until none are left).
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] topic, ARGV[ARG+1] id ('' for a batch), ARGV[ARG+2] batch size.
-- Reply: the number deleted.
local topic, id = ARGV[ARG], ARGV[ARG + 1]
local ids = dead_ids(topic, id, tonumber(ARGV[ARG + 2]))
local deleted = 0
for _, id in ipairs(ids) do
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't')
  if f[1] == 'dead' and f[2] == topic then
    remove_job(id, job, topic, 'dead', nil)
    deleted = deleted + 1
  elseif not f[1] then
    redis.call('ZREM', dead_key(topic), id)
  end
end
return deleted
