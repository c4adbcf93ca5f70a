-- lib: ready dead retry
-- movedue.lua: handle up to a batch of the partition's due work, atomically:
-- delayed jobs whose time has come become ready; reserved jobs whose lease
-- ran out end that delivery as failed (ready again, scheduled by their
-- retry schedule, or dead-lettered when their attempts are used up).
-- The topics come from timers; the caller passes the wake-up lists of the
-- topics it expects (those it saw made ready lately), and the reply names
-- the other topics made ready, for the caller to signal (signal.lua).
-- KEYS: the partition's (see lib.lua, section record), then those wake-up lists.
-- ARGV[ARG] batch size.
-- Reply: {jobs handled, next due ms or -1, now in microseconds, oldest due ms handled
-- or -1, expired leases e, then per expired lease its topic and the job's
-- new state, then the topics to signal: n, and n pairs topic, tokens}.
local budget = tonumber(ARGV[ARG])
local now, _, now_us = clock()
local handled, oldest = 0, -1
local expired = {}
-- The delayed jobs made ready without decoding their records keep their
-- index changes here, handed to flush once (move_entries), not through enter_as
-- and leave_as per job: delay_out, the delay entries they leave; ready_in,
-- ZADD arguments of their ready entries. Their counts and wake-up tokens
-- are noted once per timer.
--
-- A job with flag 4 (every job without a callback since that form, see
-- lib.lua) has the entry "topic,<due>~,id" here, which is its ready entry
-- too: it moves as it is, and its record is neither read nor written
-- (settle reads it as ready). A job without the flag has its record read
-- and written with its new state (make_ready_raw, or decoded).
local delay_out, ready_in = {}, {}

-- make_ready_raw makes the delayed job id (without flag 4), at member m of
-- the delay index, ready without decoding its record, and returns its due
-- time: false when no delayed job matches the entry, nil when the record
-- needs decoding (it has an extra part, or a callback).
local function make_ready_raw(id, raw, m)
  local s, a, d, x, f, tl, xl, at = string.match(raw, HEAD)
  local topic = string.sub(raw, at, at + tl - 1)
  if s ~= 'delay' or topic .. ',' .. x .. ',' .. id ~= m then
    return false
  end
  if xl ~= '0' or f == '1' or f == '3' then
    return nil
  end
  local pos = ready_position()
  delay_out[#delay_out + 1] = m
  ready_in[#ready_in + 1] = '0'
  ready_in[#ready_in + 1] = topic .. ',' .. pos .. ',' .. id
  put(id, record('ready', a, d, pos, f, topic, '', string.sub(raw, at + tl), tl, '0'))
  return tonumber(x)
end

-- A timer names a state and a topic: "delay,<topic>" for its delayed jobs,
-- "reserved,<topic>" for its leases.
for _, timer in ipairs(redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', int(now), 'LIMIT', '0', '100')) do
  if handled >= budget then
    break
  end
  local state, topic = string.match(timer, '^(%a+),(.*)$')
  local key = state == 'delay' and KEYS[3] or KEYS[4]
  local asked = budget - handled
  local lo, hi = topic_range(topic, now)
  local entries = redis.call('ZRANGEBYLEX', key, lo, hi, 'LIMIT', '0', int(asked))
  local in_place = 0 -- jobs made ready without decoding their records
  -- The entries to read the records of, and their ids.
  local rest, ids = {}, {}
  local mark = #topic + 15 -- after "topic," and 13 digits
  for _, m in ipairs(entries) do
    if state == 'delay' and string.byte(m, mark) == 126 then -- '~': flag 4
      delay_out[#delay_out + 1] = m
      ready_in[#ready_in + 1] = '0'
      ready_in[#ready_in + 1] = m
      in_place = in_place + 1
      local due = tonumber(string.sub(m, #topic + 2, mark - 1))
      if oldest < 0 or due < oldest then
        oldest = due
      end
    else
      rest[#rest + 1] = m
      ids[#ids + 1] = id_of(m, key)
    end
  end
  get_many(ids)
  for i, m in ipairs(rest) do
    local id = ids[i]
    -- due: the due time of a delayed job made ready, false for an entry no
    -- job matches.
    local due
    local raw = state == 'delay' and get_raw(id)
    if raw then
      due = make_ready_raw(id, raw, m)
      if due then
        in_place = in_place + 1
      end
    end
    if due == nil then
      local job = get(id)
      if not job or job.s ~= state or member(id, job) ~= m then
        due = false
      elseif state == 'delay' then
        due = tonumber(job.x)
        make_ready(id, job)
      else
        expired[#expired + 1] = topic
        expired[#expired + 1] = fail_delivery(id, job, 'ttr-expired', tonumber(job.x), nil, now)
      end
    end
    if due == false then
      index_op(key, m, false) -- an entry no job matches: drop it
    elseif due and (oldest < 0 or due < oldest) then
      oldest = due
    end
  end
  if in_place > 0 then
    count('delay,' .. topic, -in_place)
    count('ready,' .. topic, in_place)
    signal(topic, in_place)
  end
  handled = handled + #entries
  -- Handled in full: the timer's next time is its first entry after now
  -- (or sooner, for a job this call rescheduled), or it goes; the flush
  -- writes it once the records are (see raise_timer). Otherwise it stays
  -- due, for the next call.
  if #entries < asked then
    local first = redis.call('ZRANGEBYLEX', key, '[' .. topic .. ',' .. time13(now + 1) .. ',', '(' .. topic .. '-', 'LIMIT', '0', '1')
    if #first > 0 then
      raise_timer(timer, tonumber(string.match(first[1], ',(%d+)', #topic + 1)))
    else
      raise_timer(timer)
    end
  end
end
move_entries(KEYS[3], delay_out, KEYS[2], ready_in)
commit(now)
local next_due = -1
local first = redis.call('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
if first[2] then
  next_due = tonumber(first[2])
end
local reply = {handled, next_due, now_us, oldest, #expired / 2}
for _, v in ipairs(expired) do
  reply[#reply + 1] = v
end
return unsignaled_reply(reply)
