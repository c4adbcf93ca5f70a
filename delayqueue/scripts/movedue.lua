-- lib: ready dead retry
-- movedue.lua: handle up to a batch of the partition's due work, atomically:
-- delayed jobs whose time has come become ready; reserved jobs whose lease
-- ran out end that delivery as failed (ready again, scheduled by their
-- retry schedule, or dead-lettered when their attempts are used up).
-- The topics come from timers; their wake-up lists are not known before
-- the call, so the reply names the topics to signal (signal.lua).
-- KEYS: the partition's (see lib/record.lua).
-- ARGV[ARG] batch size.
-- Reply: {jobs handled, next due ms or -1, now ms, oldest due ms handled
-- or -1, expired leases e, then per expired lease its topic and the job's
-- new state, then the topics to signal: n, and n pairs topic, tokens}.
local budget = tonumber(ARGV[ARG])
local now = clock()
local handled, oldest = 0, -1
local expired = {}
for _, topic in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', int(now), 'LIMIT', 0, 100)) do
  if handled >= budget then
    break
  end
  local asked = budget - handled
  local lo, hi = topic_range(topic, now)
  local due = redis.call('ZRANGEBYLEX', KEYS[3], lo, hi, 'LIMIT', 0, asked)
  local leases = {}
  local complete = #due < asked
  if complete then
    leases = redis.call('ZRANGEBYLEX', KEYS[4], lo, hi, 'LIMIT', 0, asked - #due)
    complete = #leases < asked - #due
  end
  local ids = {}
  for i, m in ipairs(due) do
    ids[i] = id_of(m, KEYS[3])
  end
  for _, m in ipairs(leases) do
    ids[#ids + 1] = id_of(m, KEYS[4])
  end
  get_many(ids)
  for i, m in ipairs(due) do
    local id = ids[i]
    local job = get(id)
    if job and job.s == 'delay' and member(id, job) == m then
      local t = tonumber(job.x)
      if oldest < 0 or t < oldest then
        oldest = t
      end
      make_ready(id, job)
    else
      index_op(KEYS[3], m, false) -- an entry no job matches: drop it
    end
  end
  for i, m in ipairs(leases) do
    local id = ids[#due + i]
    local job = get(id)
    if job and job.s == 'reserved' and member(id, job) == m then
      expired[#expired + 1] = topic
      expired[#expired + 1] = fail_delivery(id, job, 'ttr-expired', tonumber(job.x), nil, now)
    else
      index_op(KEYS[4], m, false)
    end
  end
  handled = handled + #due + #leases
  -- Handled in full: the topic's next time here is its first delayed job
  -- or lease end after now (jobs this call rescheduled are added to timers
  -- by the flush). Otherwise its timer stays due, for the next call.
  if complete then
    local next_at
    local after, last = '[' .. topic .. ',' .. time13(now + 1) .. ',', '(' .. topic .. '-'
    for _, index in ipairs({KEYS[3], KEYS[4]}) do
      local first = redis.call('ZRANGEBYLEX', index, after, last, 'LIMIT', 0, 1)
      if #first > 0 then
        local at = tonumber(string.match(first[1], ',(%d+),', #topic + 1))
        if not next_at or at < next_at then
          next_at = at
        end
      end
    end
    if next_at then
      redis.call('ZADD', KEYS[7], int(next_at), topic)
    else
      redis.call('ZREM', KEYS[7], topic)
    end
  end
end
commit(now)
local next_due = -1
local first = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
if first[2] then
  next_due = tonumber(first[2])
end
local reply = {handled, next_due, now, oldest, #expired / 2}
for _, v in ipairs(expired) do
  reply[#reply + 1] = v
end
return unsignaled_reply(reply)
