-- push.lua: create jobs, or replace the job with the same id in whatever
-- state it is (delay, ready, reserved or dead), atomically for the batch.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] job count n, then 10 values per job: id, topic, delay ms, ttr s,
-- body, bucket number, retry schedule (comma-separated seconds or ''),
-- max attempts, if_absent (1 = leave an existing job alone), callback (JSON
-- or ''; such a job is delivered by the webhook dispatchers, never by pop).
-- Reply: {now ms, then per job: due ms, status} with status 0 created,
-- 1 replaced, 2 left alone because it existed (if_absent).
-- A replaced job leaves no stale copy: its bucket or dead-letter entry is
-- removed, and an old ready-list entry is skipped by claim, which checks the
-- state and topic of the job it pops.
local n = tonumber(ARGV[ARG])
local us = now_us()
local now = math.floor(us / 1000)
local now_text = int(now)
local due_base = math.ceil(us / 1000)
local reply = {now}
-- Counters and wake-up tokens are summed over the batch and applied once.
local tally = new_tally()
local ready_topics, ready_ids, hooks_ready = {}, {}, 0
local buckets, bucket_entries = {}, {}
local counter = tally_counter(tally)
local fields = {'t', '', 's', '', 'd', '', 'r', '', 'a', '0', 'c', now_text, 'k', ''}
for j = 0, n - 1 do
  local base = ARG + 1 + j * 10
  local id, topic = ARGV[base], ARGV[base + 1]
  local delay_ms = tonumber(ARGV[base + 2])
  local bucket_no = ARGV[base + 5]
  local job = job_key(id)
  local due = due_base + delay_ms
  -- Most pushes create a job: EXISTS is cheaper than reading four fields.
  local old = {}
  if redis.call('EXISTS', job) == 1 then
    old = redis.call('HMGET', job, 's', 't', 'k', 'd')
  end
  local status = 0
  if old[1] and ARGV[base + 8] == '1' then
    status = 2
    due = tonumber(old[4])
  else
    if old[1] then
      status = 1
      remove_job(id, job, old[2], old[1], old[3], counter)
    end
    local state = 'delay'
    if delay_ms == 0 then
      state = 'ready'
    end
    local due_text = int(due)
    -- One argument table serves every job of the batch: the fixed fields
    -- are overwritten, the optional ones appended after them.
    fields[2], fields[4], fields[6], fields[8], fields[14] = topic, state, due_text, ARGV[base + 3], bucket_no
    local k = 14
    local retry, max, callback = ARGV[base + 6], ARGV[base + 7], ARGV[base + 9]
    if retry ~= '' then
      fields[k + 1] = 'rt'
      fields[k + 2] = retry
      k = k + 2
    end
    if max ~= '0' then
      fields[k + 1] = 'm'
      fields[k + 2] = max
      k = k + 2
    end
    if callback ~= '' then
      fields[k + 1] = 'cb'
      fields[k + 2] = callback
      k = k + 2
    end
    k = body_fields(fields, k, ARGV[base + 4])
    redis.call('HSET', job, unpack(fields, 1, k))
    tally_add(tally, topic, state, 1)
    -- Index entries are added after the loop, one command per list or
    -- bucket: a job replaced later in the batch was removed from them above,
    -- so the loop appends them again only for the final version.
    if state == 'delay' then
      append_to(bucket_entries, buckets, bucket_no, due_text)
      append_to(bucket_entries, buckets, bucket_no, id)
    elseif callback ~= '' then
      redis.call('RPUSH', HOOKS, id)
      hooks_ready = hooks_ready + 1
    else
      append_to(ready_ids, ready_topics, topic, id)
    end
  end
  reply[#reply + 1] = due
  reply[#reply + 1] = status
end
apply_tally(tally)
for _, bucket_no in ipairs(buckets) do
  local entries = bucket_entries[bucket_no]
  for i = 1, #entries, 400 do
    redis.call('ZADD', bucket_key(bucket_no), unpack(entries, i, math.min(i + 399, #entries)))
  end
end
for _, topic in ipairs(ready_topics) do
  local ids = ready_ids[topic]
  for i = 1, #ids, 200 do
    redis.call('RPUSH', ready_key(topic), unpack(ids, i, math.min(i + 199, #ids)))
  end
  signal(topic, #ids)
end
if hooks_ready > 0 then
  signal_key(HOOK_WAKE, hooks_ready)
end
return reply
