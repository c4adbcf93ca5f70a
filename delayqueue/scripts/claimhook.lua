-- claimhook.lua: take up to count ready jobs that have a callback and lease
-- each for its ttr (the call's timeout plus a margin), atomically, for a
-- webhook dispatcher. Two dispatchers never hold one job at once.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] count, ARGV[ARG+1] max stale entries to skip.
-- Reply: {now ms, then 5 values per job: id, topic, attempts, body,
-- callback JSON}.
local want = tonumber(ARGV[ARG])
local max_skip = tonumber(ARGV[ARG + 1])
local now = now_ms()
local reply = {now}
local claimed, skipped = 0, 0
while claimed < want and skipped < max_skip do
  local id = redis.call('LPOP', HOOKS)
  if not id then
    break
  end
  local job = job_key(id)
  local f = redis.call('HMGET', job, 's', 't', 'r', 'a', 'k', 'n', 'cb')
  if f[1] == 'ready' and f[7] then
    local attempts = tonumber(f[4]) + 1
    local lease = now + tonumber(f[3]) * 1000
    set_state(job, f[2], 'ready', 'reserved')
    redis.call('HSET', job, 'a', int(attempts), 'l', int(lease))
    redis.call('ZADD', bucket_key(f[5]), int(lease), id)
    reply[#reply + 1] = id
    reply[#reply + 1] = f[2]
    reply[#reply + 1] = attempts
    reply[#reply + 1] = read_body(job, f[6])
    reply[#reply + 1] = f[7]
    claimed = claimed + 1
  else
    skipped = skipped + 1
  end
end
if redis.call('LLEN', HOOK_WAKE) == 0 and redis.call('LLEN', HOOKS) > 0 then
  signal_key(HOOK_WAKE, 1)
end
return reply
