-- kick.lua: send dead letters of a topic back to ready, attempts reset.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] topic, ARGV[ARG+1] id ('' for the oldest), ARGV[ARG+2] how many
-- of the oldest (when no id).
-- Reply: the ids kicked.
local topic, id = ARGV[ARG], ARGV[ARG + 1]
local ids = dead_ids(topic, id, tonumber(ARGV[ARG + 2]))
local kicked = {}
for _, id in ipairs(ids) do
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't')
  if f[1] == 'dead' and f[2] == topic then
    redis.call('ZREM', dead_key(topic), id)
    set_state(job, topic, 'dead', 'ready')
    redis.call('HSET', job, 'a', '0')
    redis.call('HDEL', job, 'dr', 'dt')
    make_ready(id, job, topic, false)
    kicked[#kicked + 1] = id
  end
end
return kicked
