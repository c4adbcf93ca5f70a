-- claim.lua: take the first ready job of the listed topics and lease it to
-- the caller, atomically: popping the id and recording the lease are one
-- step, so no crash or lost reply between them can lose the job.
-- KEYS[1..n] the topics' ready lists, KEYS[n+1..2n] their wake-up lists.
-- ARGV[1] n, ARGV[2] job key prefix, ARGV[3]/ARGV[4] bucket key prefix and
-- suffix, ARGV[5] max stale entries to skip, ARGV[6..5+n] the topic names.
-- Reply: {id, topic, ttr, attempts, body, lease ms, now ms}, or
-- {'', '', 0, 0, '', 0, now ms, skipped} when nothing was claimed.
-- A popped id whose job is gone, not ready, or now in another topic is a
-- stale entry (deleted, finished or re-pushed job) and is dropped.
local n = tonumber(ARGV[1])
local prefix = ARGV[2]
local max_skip = tonumber(ARGV[5])
local us = now_us()
local now = math.floor(us / 1000)
local skipped = 0

-- keep_signalled makes sure a topic that still has ready ids has at least
-- one wake-up token, so other waiters are not left sleeping.
local function keep_signalled()
  for i = 1, n do
    if redis.call('LLEN', KEYS[n + i]) == 0 and redis.call('LLEN', KEYS[i]) > 0 then
      redis.call('RPUSH', KEYS[n + i], '1')
    end
  end
end

for i = 1, n do
  local topic = ARGV[5 + i]
  while skipped < max_skip do
    local id = redis.call('LPOP', KEYS[i])
    if not id then
      break
    end
    local job = prefix .. id
    local f = redis.call('HMGET', job, 's', 't', 'r', 'a', 'k', 'n')
    if f[1] == 'ready' and f[2] == topic then
      local attempts = tonumber(f[4]) + 1
      local lease = now + tonumber(f[3]) * 1000
      redis.call('HSET', job, 's', 'reserved', 'a', int(attempts), 'l', int(lease))
      redis.call('ZADD', ARGV[3] .. f[5] .. ARGV[4], int(lease), id)
      local body = read_body(job, f[6])
      keep_signalled()
      return {id, topic, tonumber(f[3]), attempts, body, lease, now}
    end
    skipped = skipped + 1
  end
end
keep_signalled()
return {'', '', 0, 0, '', 0, now, skipped}
