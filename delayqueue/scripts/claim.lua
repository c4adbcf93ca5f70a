-- lib: remove
-- claim.lua: finish jobs, then, for each of several pop requests, take up
-- to its count of ready jobs of its topics (earlier topics first) and lease
-- each for its ttr, atomically: taking a job and recording its lease are
-- one step, so no crash or lost reply between them can lose the job.
-- Requests are served in order, as if each ran alone. The finishes are
-- finish.lua's (consumers done with jobs), done first, as if they ran just
-- before: the server sends its finishes with the claims of the same
-- partition (without redis.wait_replicas), so that a load of pops and
-- finishes costs one script call where it cost one of each.
-- KEYS: the partition's (see lib.lua, section record), then the wake-up lists of
-- every topic the requests name.
-- ARGV[ARG] number of ids to finish f, then f ids; then the number of
-- requests, and per request: count, number of topics n, n topics.
-- Reply: {now ms, f, then per id finished its status and topic (as
-- finish.lua's), then per request: jobs claimed m, and 5 values per job:
-- id, topic, ttr, attempts, body}.
-- The finishes' writes wait for the claims' flush, which writes both.
local finishing = num(ARGV[ARG])
local finished = finishing > 0 and remove_ids(ARG + 1, ARG + finishing, true)
ARG = ARG + 1 + finishing
local now = clock()
-- Every job this call reads it found in ready: a record with flag 4 that
-- says delay is ready (the scanner moved its entry), no ZSCORE needed.
settle_reads = false
-- The records changed in place keep their index changes and counts here,
-- handed to flush once per call (move_entries), not through enter_as and leave_as
-- per job (most of a small claim's cost): ready_out, the ready entries they
-- leave; reserved_in, ZADD arguments of their lease entries; moved[topic],
-- {jobs, earliest lease ms, that lease as text}, its topics listed in the array part.
local ready_out, reserved_in, moved = {}, {}, {}

-- reserve leases the job id, ready at member m of topic, and returns its
-- ttr, attempts and body (nil when no ready job matches the entry). A
-- record with no extra part is changed in place, without decoding it. A
-- record with flag 4 may say delay: its entry was moved to ready as it is.
local function reserve(id, m, topic)
  local raw = get_raw(id)
  if raw then
    local s, a, d, x, f, tl, xl, at = string.match(raw, HEAD)
    local marked = f >= '4'
    if not (s == 'ready' or marked and s == 'delay') or string.sub(raw, at, at + tl - 1) ~= topic then
      return nil
    end
    if xl ~= '0' or topic .. ',' .. x .. (marked and '~,' or ',') .. id ~= m then
      raw = nil -- an extra part, or another entry: the decoded way below
    else
      local tail = string.sub(raw, at + tl)
      local ttr, rl, cl, bl, bat = string.match(tail, '^(%d+),%d+,%d+,(%d+),(%d+),(%-?%d+):()')
      ttr = num(ttr)
      local lease_ms = now + ttr * 1000
      local lease = time13(lease_ms)
      a = num(a) + 1
      ready_out[#ready_out + 1] = m
      reserved_in[#reserved_in + 1] = '0'
      reserved_in[#reserved_in + 1] = topic .. ',' .. lease .. ',' .. id
      local c = moved[topic]
      if not c then
        moved[#moved + 1] = topic
        moved[topic] = {1, lease_ms, lease}
      else
        c[1] = c[1] + 1
        if lease_ms < c[2] then
          c[2], c[3] = lease_ms, lease
        end
      end
      -- The extra part keeps the ready position: a due time (13 digits, so
      -- 22 bytes), one made now (30, so 39), or one of the earlier form.
      local ql = #x == 13 and '22' or #x == 30 and '39' or nil
      put(id, record('reserved', int(a), d, lease, f, topic, x .. ',0,0,0,0:', tail, tl, ql))
      local body
      if f == '2' or f == '3' or f == '6' then
        body = redis.call('HGET', KEYS[9], id) or ''
      else
        body = string.sub(tail, bat + rl + cl)
      end
      return ttr, a, body
    end
  end
  local job = get(id)
  if not job then
    return nil
  end
  local s = job.s
  if s == 'delay' and job.f >= 4 then
    s = 'ready'
  end
  if s ~= 'ready' or member_for(id, s, job.x, job.topic, job.f) ~= m then
    return nil
  end
  job.s = s
  local ttr = tonumber(tail(job).r)
  extra(job).q = job.x
  move(id, job, 'reserved', time13(now + ttr * 1000))
  job.a = job.a + 1
  return ttr, job.a, body_of(id, job)
end

local requests = num(ARGV[ARG])
local reply = {now, finishing}
for i = 1, finishing * 2 do
  reply[i + 2] = finished[i]
end
-- demand[topic] is what the requests not started yet may take of topic,
-- so that one ZRANGEBYLEX, and one HMGET, read a topic's entries for
-- every request of the call that names it, not one each. (A call of one
-- request has none.)
local demand = {}
local a = ARG + 1
if requests > 1 then
  for _ = 1, requests do
    local want, n = num(ARGV[a]), num(ARGV[a + 1])
    for i = a + 2, a + 1 + n do
      demand[ARGV[i]] = (demand[ARGV[i]] or 0) + want
    end
    a = a + 2 + n
  end
end
-- Jobs are taken from the head of a topic's index. reads[topic] is the
-- topic's last read: {entries, their ids, the next to serve, the entries
-- read so far (a later read skips them), whether it found the index's end}.
local reads = {}

-- read_more reads the topic's next entries after r, its last read (or
-- nil): need for the request being served and the demand of those after
-- it. (A later request served by a topic it lists before this one leaves
-- some unused: they were only read, and the call's size, maxClaimsPerCall
-- jobs, bounds the demand.)
local function read_more(topic, need, r)
  local asked = need + (demand[topic] or 0)
  local from = r and r[4] or 0
  local lo, hi = topic_range(topic)
  local got = redis.call('ZRANGEBYLEX', KEYS[2], lo, hi, 'LIMIT', int(from), int(asked))
  local got_ids = {}
  for k, m in ipairs(got) do
    got_ids[k] = id_of(m, KEYS[2])
  end
  get_many(got_ids)
  r = {got, got_ids, 1, from + #got, #got < asked}
  reads[topic] = r
  return r
end

a = ARG + 1
for _ = 1, requests do
  local want, n = num(ARGV[a]), num(ARGV[a + 1])
  local first_topic = a + 2
  a = first_topic + n
  if requests > 1 then
    for i = first_topic, a - 1 do
      demand[ARGV[i]] = demand[ARGV[i]] - want
    end
  end
  local head = #reply
  reply[head + 1] = 0
  local claimed = 0
  for i = first_topic, a - 1 do
    local topic = ARGV[i]
    local r = reads[topic]
    while claimed < want do
      if not r or r[3] > #r[1] then
        if r and r[5] then
          break
        end
        r = read_more(topic, want - claimed, r)
        if #r[1] == 0 then
          break
        end
      end
      local k = r[3]
      r[3] = k + 1
      local id, m = r[2][k], r[1][k]
      local ttr, attempts, body = reserve(id, m, topic)
      if ttr then
        reply[#reply + 1] = id
        reply[#reply + 1] = topic
        reply[#reply + 1] = ttr
        reply[#reply + 1] = attempts
        reply[#reply + 1] = body
        claimed = claimed + 1
      else
        index_op(KEYS[2], m, false) -- an entry no job matches: drop it
      end
    end
  end
  reply[head + 1] = claimed
end
for _, topic in ipairs(moved) do
  local c = moved[topic]
  count('reserved,' .. topic, c[1])
  count('ready,' .. topic, -c[1])
  lower_timer('reserved,' .. topic, c[2], c[3])
end
move_entries(KEYS[2], ready_out, KEYS[4], reserved_in)
local left = flush()
-- A topic that still has ready jobs keeps at least one wake-up token, so
-- that other held pops are not left sleeping: the caller may have taken
-- its token to come here, and served another topic. (Flush deleted the
-- tokens of topics it left with none.)
for topic, wake in pairs(WAKE) do
  local n = left['ready,' .. topic]
  if n ~= 0 and redis.call('LLEN', wake) == 0 and (n or redis.call('HEXISTS', KEYS[8], 'ready,' .. topic) == 1) then
    signal_key(wake, 1)
  end
end
return reply
