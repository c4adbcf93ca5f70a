-- claim.lua: take up to count ready jobs of the listed topics (earlier
-- topics first) and lease each for its ttr, atomically: popping an id and
-- recording its lease are one step, so no crash or lost reply between them
-- can lose the job.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] count, ARGV[ARG+1] max stale entries to skip, ARGV[ARG+2..] the
-- topics.
-- Reply: {now ms, skipped, then 5 values per job: id, topic, ttr, attempts,
-- body}.
-- A popped id whose job is gone, not ready, or now in another topic is a
-- stale entry (of a deleted, finished or re-pushed job) and is dropped.
local want = tonumber(ARGV[ARG])
local max_skip = tonumber(ARGV[ARG + 1])
local now = now_ms()
local skipped = 0
local reply = {now, 0}
local claimed = 0
local moved = {} -- jobs claimed per topic, for the counters
local first_topic = ARG + 2
for i = first_topic, #ARGV do
  local topic = ARGV[i]
  local ready = ready_key(topic)
  while claimed < want and skipped < max_skip do
    local id = redis.call('LPOP', ready)
    if not id then
      break
    end
    local job = job_key(id)
    local f = redis.call('HMGET', job, 's', 't', 'r', 'a', 'k', 'n')
    if f[1] == 'ready' and f[2] == topic then
      local attempts = tonumber(f[4]) + 1
      local lease = now + tonumber(f[3]) * 1000
      redis.call('HSET', job, 's', 'reserved', 'a', int(attempts), 'l', int(lease))
      moved[topic] = (moved[topic] or 0) + 1
      redis.call('ZADD', bucket_key(f[5]), int(lease), id)
      reply[#reply + 1] = id
      reply[#reply + 1] = topic
      reply[#reply + 1] = tonumber(f[3])
      reply[#reply + 1] = attempts
      reply[#reply + 1] = read_body(job, f[6])
      claimed = claimed + 1
    else
      skipped = skipped + 1
    end
  end
end
-- A topic that still has ready ids keeps at least one wake-up token, so
-- other held pops are not left sleeping.
for i = first_topic, #ARGV do
  local topic = ARGV[i]
  if moved[topic] then
    count(topic, 'reserved', moved[topic])
    count(topic, 'ready', -moved[topic])
    moved[topic] = nil -- a topic listed twice is counted once
  end
  if redis.call('LLEN', wake_key(topic)) == 0 and redis.call('LLEN', ready_key(topic)) > 0 then
    signal(topic, 1)
  end
end
reply[2] = skipped
return reply
