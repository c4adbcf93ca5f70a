-- lib:
-- claimhook.lua: take up to count ready jobs that have a callback and lease
-- each for its ttr (the call's timeout plus a margin), atomically, for a
-- webhook dispatcher. Two dispatchers never hold one job at once.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG] count.
-- Reply: {now ms, then 6 values per job: id, topic, attempts, body,
-- callback JSON, creation time ms (the receipt's other half, with the
-- attempts: see held_delivery)}.
local now = clock()
local reply = {now}
local members = redis.call('ZRANGE', KEYS[6], 0, tonumber(ARGV[ARG]) - 1)
local ids = {}
for i, m in ipairs(members) do
  ids[i] = id_of(m, KEYS[6])
end
get_many(ids)
for k, id in ipairs(ids) do
  local job = get(id)
  if job and job.s == 'ready' and has_callback(job) and member(id, job) == members[k] then
    tail(job)
    extra(job).q = job.x
    move(id, job, 'reserved', time13(now + tonumber(job.r) * 1000))
    job.a = job.a + 1
    reply[#reply + 1] = id
    reply[#reply + 1] = job.topic
    reply[#reply + 1] = job.a
    reply[#reply + 1] = body_of(id, job)
    reply[#reply + 1] = job.cb
    reply[#reply + 1] = job.c
  else
    index_op(KEYS[6], members[k], false)
  end
end
flush()
if redis.call('LLEN', KEYS[10]) == 0 and redis.call('ZCARD', KEYS[6]) > 0 then
  signal_key(KEYS[10], 1)
end
return reply
