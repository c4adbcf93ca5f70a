-- lib:
-- claim.lua: for each of several pop requests, take up to its count of ready
-- jobs of its topics (earlier topics first) and lease each for its ttr,
-- atomically: taking a job and recording its lease are one step, so no
-- crash or lost reply between them can lose the job. Requests are served in
-- order, as if each ran alone.
-- KEYS: the partition's (see lib/record.lua), then the wake-up lists of
-- every topic the requests name.
-- ARGV[ARG] number of requests, then per request: count, number of topics
-- n, n topics.
-- Reply: {now ms, then per request: jobs claimed m, and 5 values per job:
-- id, topic, ttr, attempts, body}.
local requests = tonumber(ARGV[ARG])
local now = clock()
local reply = {now}
local a = ARG + 1
-- Jobs are taken from the head of a topic's index, so those this call took
-- already are its first taken[topic] entries: a later request skips them.
local taken = {}
for _ = 1, requests do
  local want, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local first_topic = a + 2
  a = first_topic + n
  local head = #reply
  reply[head + 1] = 0
  local claimed = 0
  for i = first_topic, first_topic + n - 1 do
    if claimed >= want then
      break
    end
    local topic = ARGV[i]
    local lo, hi = topic_range(topic)
    local members = redis.call('ZRANGEBYLEX', KEYS[2], lo, hi, 'LIMIT', taken[topic] or 0, want - claimed)
    if #members > 0 then
      taken[topic] = (taken[topic] or 0) + #members
      local ids = {}
      for k, m in ipairs(members) do
        ids[k] = id_of(m, KEYS[2])
      end
      get_many(ids)
      for k, id in ipairs(ids) do
        local job = get(id)
        if job and job.s == 'ready' and member(id, job) == members[k] then
          local ttr = tonumber(tail(job).r)
          extra(job).q = job.x
          move(id, job, 'reserved', time13(now + ttr * 1000))
          job.a = job.a + 1
          reply[#reply + 1] = id
          reply[#reply + 1] = topic
          reply[#reply + 1] = ttr
          reply[#reply + 1] = job.a
          reply[#reply + 1] = body_of(id, job)
          claimed = claimed + 1
        else
          index_op(KEYS[2], members[k], false) -- an entry no job matches: drop it
        end
      end
    end
  end
  reply[head + 1] = claimed
end
flush()
-- A topic that still has ready jobs keeps at least one wake-up token, so
-- that other held pops are not left sleeping (flush deleted the tokens of
-- topics left with none).
for topic, wake in pairs(WAKE) do
  if redis.call('LLEN', wake) == 0 and redis.call('HEXISTS', KEYS[8], 'ready,' .. topic) == 1 then
    signal_key(wake, 1)
  end
end
return reply
