-- claimhook.lua: take up to count ready jobs that have a callback and lease
-- each for its ttr (the call's timeout plus a margin), atomically, for a
-- webhook dispatcher. Two dispatchers never hold one job at once.
-- KEYS: the partition's (see lib.lua).
-- ARGV[ARG] count.
-- Reply: {now ms, then 5 values per job: id, topic, attempts, body,
-- callback JSON}.
local want = tonumber(ARGV[ARG])
local now = now_ms()
local reply = {now}
local members = redis.call('ZRANGE', HOOKS, 0, want - 1)
if #members > 0 then
  redis.call('ZREM', HOOKS, unpack(members))
end
local ids = {}
for i, m in ipairs(members) do
  ids[i] = id_of(m, HOOKS)
end
get_many(ids)
for _, id in ipairs(ids) do
  local job = get(id)
  if job and job.s == 'ready' and job.cb ~= '' then
    count('ready', job.topic, -1)
    job.q = job.x
    job.s, job.x = 'reserved', time13(now + tonumber(job.r) * 1000)
    job.a = job.a + 1
    put(id, job)
    enter(id, job)
    reply[#reply + 1] = id
    reply[#reply + 1] = job.topic
    reply[#reply + 1] = job.a
    reply[#reply + 1] = body_of(id, job)
    reply[#reply + 1] = job.cb
  end
end
flush()
if redis.call('LLEN', HOOK_WAKE) == 0 and redis.call('ZCARD', HOOKS) > 0 then
  signal_key(HOOK_WAKE, 1)
end
return reply
