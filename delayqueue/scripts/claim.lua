-- claim.lua: for each of several pop requests, take up to its count of ready
-- jobs of its topics (earlier topics first) and lease each for its ttr,
-- atomically: popping an id and recording its lease are one step, so no
-- crash or lost reply between them can lose the job. Requests are served in
-- order, as if each ran alone.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] number of requests, ARGV[ARG+1] max stale entries one request
-- skips, then per request: count, number of topics n, n topics.
-- Reply: {now ms, then per request: stale entries skipped, jobs claimed m,
-- and 5 values per job: id, topic, ttr, attempts, body}.
-- A popped id whose job is gone, not ready, or now in another topic is a
-- stale entry (of a deleted, finished or re-pushed job) and is dropped.
local requests = tonumber(ARGV[ARG])
local max_skip = tonumber(ARGV[ARG + 1])
local now = now_ms()
local reply = {now}
local moved = {}    -- jobs claimed per topic, for the counters
local touched = {}  -- every topic listed, once
local listed = {}
-- Leases go to their buckets at the end, one ZADD per bucket.
local leases, buckets = {}, {}
local a = ARG + 2
for _ = 1, requests do
  local want, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local first_topic = a + 2
  a = first_topic + n
  local skipped, claimed = 0, 0
  local head = #reply
  reply[head + 1] = 0
  reply[head + 2] = 0
  for i = first_topic, first_topic + n - 1 do
    local topic = ARGV[i]
    if not listed[topic] then
      listed[topic] = true
      touched[#touched + 1] = topic
    end
    local ready = ready_key(topic)
    while claimed < want and skipped < max_skip do
      local id = redis.call('LPOP', ready)
      if not id then
        break
      end
      local job = job_key(id)
      local f = redis.call('HMGET', job, 's', 't', 'r', 'a', 'k', 'n', 'b1', 'b2')
      if f[1] == 'ready' and f[2] == topic then
        local attempts = tonumber(f[4]) + 1
        local lease = int(now + tonumber(f[3]) * 1000)
        redis.call('HSET', job, 's', 'reserved', 'a', int(attempts), 'l', lease)
        moved[topic] = (moved[topic] or 0) + 1
        local bucket = bucket_key(f[5])
        append_to(leases, buckets, bucket, lease)
        append_to(leases, buckets, bucket, id)
        reply[#reply + 1] = id
        reply[#reply + 1] = topic
        reply[#reply + 1] = tonumber(f[3])
        reply[#reply + 1] = attempts
        reply[#reply + 1] = read_small_body(job, f[6], f[7], f[8])
        claimed = claimed + 1
      else
        skipped = skipped + 1
      end
    end
  end
  reply[head + 1] = skipped
  reply[head + 2] = claimed
end
for _, bucket in ipairs(buckets) do
  redis.call('ZADD', bucket, unpack(leases[bucket]))
end
-- A topic that still has ready ids keeps at least one wake-up token, so
-- other held pops are not left sleeping.
for _, topic in ipairs(touched) do
  if moved[topic] then
    count(topic, 'reserved', moved[topic])
    count(topic, 'ready', -moved[topic])
  end
  if redis.call('LLEN', wake_key(topic)) == 0 and redis.call('LLEN', ready_key(topic)) > 0 then
    signal(topic, 1)
  end
end
return reply
