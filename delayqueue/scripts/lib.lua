-- lib.lua: the state machine every script shares; prepended to each of them
-- (see scripts.go). It only defines locals.
--
-- A script works on one partition and touches only keys passed in KEYS,
-- all of which carry the partition's hash tag. KEYS[1..10] are always the
-- partition's keys, in this order (keys.go builds them):
--   1 jobs      HASH id -> the job's record (see decode)
--   2 ready     ZSET, every score 0, members "topic,<position>,id": jobs to
--               pop, per topic in the order they became ready
--   3 delayed   ZSET (scores 0) "topic,<due ms>,id"
--   4 reserved  ZSET (scores 0) "topic,<lease end ms>,id"
--   5 dead      ZSET (scores 0) "topic,<death ms>,id"
--   6 hooks     ZSET (scores 0) "<position>,id": ready jobs with a callback,
--               for the webhook dispatchers, never for /pop
--   7 timers    ZSET topic -> ms: no job of the topic here is due, nor its
--               lease over, before that time (a lower bound the scanner
--               raises)
--   8 counts    HASH "<state>,<topic>" -> jobs in that state; "dropped,<topic>"
--               -> its dead letters dropped over the cap or the ttl; "seq" ->
--               the last ready position handed out
--   9 bodies    HASH id -> body, for bodies longer than BODY_INLINE bytes
--   10 hookwake LIST of tokens that wake the webhook dispatchers
--   11.. the wake-up lists of the topics named in the ARGV header: LISTs of
--               tokens that wake this partition's held pops of the topic
-- Times are zero-padded to 13 digits and positions to 16, so that the
-- members of a topic sort by them. A topic holds no comma (push refuses
-- one), so "topic," starts exactly the members of that topic.
--
-- Every script receives the same ARGV header; its own arguments start at
-- ARGV[ARG]:
--   1 wake-up token cap per list
--   2 dead letters kept per topic in this partition, 3 their time to live ms
--   4 n, then 5..4+n the topics whose wake-up lists are KEYS[11..10+n]
local JOBS, READY, DELAYED, RESERVED, DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local HOOKS, TIMERS, COUNTS, BODIES, HOOK_WAKE = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local WAKE_CAP, DEAD_MAX, DEAD_TTL = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local WAKE = {}
local ARG = 5
do
  local n = tonumber(ARGV[4])
  for i = 1, n do
    WAKE[ARGV[4 + i]] = KEYS[10 + i]
  end
  ARG = 5 + n
end

-- Bodies up to this many bytes live in the job's record; longer ones in
-- BODIES, so that a state change does not copy them.
local BODY_INLINE = 4096

-- now_ms reads the one clock every instance shares: Redis TIME.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- now_ceil_ms is now rounded up, for due times: a job is never early.
local function now_ceil_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end

-- int renders a number as a decimal integer string (Redis' Lua and
-- miniredis' Lua print large numbers differently; this prints both alike).
local function int(n)
  return string.format('%d', n)
end

local function time13(ms)
  return string.format('%013d', ms)
end

-- The job record, one string: a header of comma-separated numbers, a
-- colon, then the variable parts back to back:
--   state,attempts,due,pos,ttr,created,max,#topic,#retry,#callback,#extra,#body:
--   <topic><retry><callback><extra><body>
-- state is delay|ready|reserved|dead; due the time the job was or will be
-- ready (ms); pos its place in its state's index (due, ready position,
-- lease end or death time); ttr in seconds; created ms; max its max
-- attempts (0 none given); retry the schedule, comma-separated seconds;
-- callback its JSON. #body is -1 when the body is in BODIES. extra holds
-- what only some jobs have, itself "readypos,deadat,status,#reason,#error:
-- <reason><error><response>": the ready position a reserved job came from
-- (to give it back in place), and for dead and failed webhook jobs the
-- death time and reason and the last call's status, error and answer.
local HEADER = '^(%a+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%-?%d+):()'
local EXTRA = '^(%d+),(%d+),(%d+),(%d+),(%d+):()'

local function decode(raw)
  if not raw then
    return nil
  end
  local s, a, d, x, r, c, m, tl, rl, cl, xl, bl, at = string.match(raw, HEADER)
  if not s then
    return nil
  end
  tl, rl, cl, xl, bl = tonumber(tl), tonumber(rl), tonumber(cl), tonumber(xl), tonumber(bl)
  local job = {s = s, a = tonumber(a), d = d, x = x, r = r, c = c, m = m,
    q = '0', dt = '0', ls = '0', dr = '', le = '', lb = ''}
  job.topic = string.sub(raw, at, at + tl - 1)
  at = at + tl
  job.retry = string.sub(raw, at, at + rl - 1)
  at = at + rl
  job.cb = string.sub(raw, at, at + cl - 1)
  at = at + cl
  if xl > 0 then
    local extra = string.sub(raw, at, at + xl - 1)
    local q, dt, ls, drl, lel, xat = string.match(extra, EXTRA)
    job.q, job.dt, job.ls = q, dt, ls
    drl, lel = tonumber(drl), tonumber(lel)
    job.dr = string.sub(extra, xat, xat + drl - 1)
    job.le = string.sub(extra, xat + drl, xat + drl + lel - 1)
    job.lb = string.sub(extra, xat + drl + lel)
  end
  at = at + xl
  if bl < 0 then
    job.separate = true
  else
    job.body = string.sub(raw, at, at + bl - 1)
  end
  return job
end

local function encode(job)
  local extra = ''
  if job.q ~= '0' or job.dt ~= '0' or job.ls ~= '0' or job.dr ~= '' or job.le ~= '' or job.lb ~= '' then
    extra = job.q .. ',' .. job.dt .. ',' .. job.ls .. ',' .. #job.dr .. ',' .. #job.le .. ':' ..
      job.dr .. job.le .. job.lb
  end
  local body, bl = job.body, -1
  if not job.separate then
    bl = #body
  else
    body = ''
  end
  return job.s .. ',' .. int(job.a) .. ',' .. job.d .. ',' .. job.x .. ',' .. job.r .. ',' .. job.c .. ',' ..
    job.m .. ',' .. #job.topic .. ',' .. #job.retry .. ',' .. #job.cb .. ',' .. #extra .. ',' .. bl .. ':' ..
    job.topic .. job.retry .. job.cb .. extra .. body
end

-- member is the job's entry in the index of its state.
local function member(id, job)
  if job.s == 'ready' and job.cb ~= '' then
    return job.x .. ',' .. id
  end
  return job.topic .. ',' .. job.x .. ',' .. id
end

-- index_of is the key of the index holding a job in its state.
local function index_of(job)
  if job.s == 'ready' then
    if job.cb ~= '' then
      return HOOKS
    end
    return READY
  elseif job.s == 'delay' then
    return DELAYED
  elseif job.s == 'reserved' then
    return RESERVED
  end
  return DEAD
end

-- id_of is the id in an index member: after the position in hooks, after
-- the topic and the position in the other indexes.
local function id_of(m, key)
  local at = string.find(m, ',', 1, true)
  if key ~= HOOKS then
    at = string.find(m, ',', at + 1, true)
  end
  return string.sub(m, at + 1)
end

-- The bounds of a topic's members in an index, for ZRANGEBYLEX: all of
-- them, and those whose time is at most ms.
local function topic_min(topic)
  return '[' .. topic .. ','
end

local function topic_max(topic)
  return '(' .. topic .. '-' -- '-' follows ','
end

local function topic_until(topic, ms)
  return '(' .. topic .. ',' .. time13(ms + 1) .. ','
end

-- The changes a script makes are gathered here and written by flush, with
-- one command per key where it can: batches of a thousand jobs cost a
-- handful of commands, not thousands. Reads go through get, which sees the
-- script's own pending writes, so an id met twice in one call behaves as
-- if the two changes ran one after the other.
local cache = {}     -- id -> job, or false when it has none
local dirty = {}     -- ids whose record to write
local dirty_ids = {}
local body_ops = {}  -- id -> body to write, or false to delete
local body_ids = {}
local index_ops = {} -- key -> member -> true (add) or false (remove)
local index_keys = {}
local tally = {}     -- counts field -> delta
local tally_fields = {}
local timer_min = {} -- topic -> earliest time to add to timers
local timer_topics = {}
local touched = {}   -- topic -> true, for the clean-up of emptied topics
local touched_topics = {}
local signals = {}   -- wake-up list -> tokens to add
local signal_keys = {}
local unsignaled = {} -- topics made ready whose wake-up list was not given
local unsignaled_n = {} -- and their tokens

local function touch_topic(topic)
  if not touched[topic] then
    touched[topic] = true
    touched_topics[#touched_topics + 1] = topic
  end
end

local function get(id)
  local job = cache[id]
  if job == nil then
    job = decode(redis.call('HGET', JOBS, id)) or false
    cache[id] = job
  end
  return job or nil
end

-- get_many loads ids not cached yet with one HMGET.
local function get_many(ids)
  local missing = {}
  for _, id in ipairs(ids) do
    if cache[id] == nil then
      missing[#missing + 1] = id
    end
  end
  for i = 1, #missing, 500 do
    local chunk = {unpack(missing, i, math.min(i + 499, #missing))}
    local raws = redis.call('HMGET', JOBS, unpack(chunk))
    for j, id in ipairs(chunk) do
      cache[id] = decode(raws[j]) or false
    end
  end
end

local function index_op(key, m, present)
  local ops = index_ops[key]
  if not ops then
    ops = {}
    index_ops[key] = ops
    index_keys[#index_keys + 1] = key
  end
  ops[m] = present
end

local function count(state, topic, delta)
  local field = state .. ',' .. topic
  if not tally[field] then
    tally[field] = 0
    tally_fields[#tally_fields + 1] = field
  end
  tally[field] = tally[field] + delta
  touch_topic(topic)
end

local function timer(topic, ms)
  local t = timer_min[topic]
  if not t then
    timer_topics[#timer_topics + 1] = topic
  end
  if not t or ms < t then
    timer_min[topic] = ms
  end
end

-- enter puts a job in the index of its state and counts it there.
local function enter(id, job)
  index_op(index_of(job), member(id, job), true)
  count(job.s, job.topic, 1)
  if job.s == 'delay' or job.s == 'reserved' then
    timer(job.topic, tonumber(job.x))
  end
end

-- leave takes a job out of the index of its state and its count.
local function leave(id, job)
  index_op(index_of(job), member(id, job), false)
  count(job.s, job.topic, -1)
end

local function put(id, job)
  cache[id] = job
  if not dirty[id] then
    dirty[id] = true
    dirty_ids[#dirty_ids + 1] = id
  end
end

-- create stores a new job with body (its fields other than the body set).
local function create(id, job, body)
  if #body > BODY_INLINE then
    job.separate = true
    job.body = nil
    body_ops[id] = body
    body_ids[#body_ids + 1] = id
  else
    -- A replaced job's separate body was marked for deletion by remove.
    job.separate = false
    job.body = body
  end
  put(id, job)
  enter(id, job)
end

-- remove deletes a job and every trace of it.
local function remove(id, job)
  leave(id, job)
  cache[id] = false
  if not dirty[id] then
    dirty[id] = true
    dirty_ids[#dirty_ids + 1] = id
  end
  if job.separate then
    body_ops[id] = false
    body_ids[#body_ids + 1] = id
  end
end

-- move changes a job's state, with its index position pos.
local function move(id, job, state, pos)
  leave(id, job)
  job.s, job.x = state, pos
  put(id, job)
  enter(id, job)
end

-- body_of returns a job's body, reading BODIES when it is kept there.
local function body_of(id, job)
  if not job.separate then
    return job.body
  end
  local pending = body_ops[id]
  if pending then
    return pending
  end
  return redis.call('HGET', BODIES, id) or ''
end

-- Ready positions come from one counter per partition, so that a topic's
-- jobs pop in the order they became ready.
local positions_left, next_position = 0, 0
local function ready_position()
  if positions_left == 0 then
    -- A few at a time: most calls make one or a few jobs ready.
    positions_left = 64
    next_position = redis.call('HINCRBY', COUNTS, 'seq', positions_left) - positions_left
  end
  positions_left = positions_left - 1
  next_position = next_position + 1
  return string.format('%016d', next_position)
end

-- signal leaves up to n wake-up tokens for the held pops of topic (or, with
-- topic nil, for the webhook dispatchers). A topic whose wake-up list the
-- call was not given is reported in unsignaled, for the caller to signal.
local function signal(topic, n)
  local key = HOOK_WAKE
  if topic then
    key = WAKE[topic]
    if not key then
      if not unsignaled_n[topic] then
        unsignaled[#unsignaled + 1] = topic
        unsignaled_n[topic] = 0
      end
      unsignaled_n[topic] = unsignaled_n[topic] + n
      return
    end
  end
  if not signals[key] then
    signals[key] = 0
    signal_keys[#signal_keys + 1] = key
  end
  signals[key] = signals[key] + n
end

-- Wake-up lists expire when no token was added for this long: tokens only
-- wake, so a list nobody pops from must not stay behind.
local WAKE_TTL_MS = 60000

local function signal_key(key, n)
  local room = WAKE_CAP - redis.call('LLEN', key)
  if n > room then
    n = room
  end
  if n <= 0 then
    return
  end
  while n > 0 do
    local batch = math.min(n, 200)
    local tokens = {}
    for i = 1, batch do
      tokens[i] = '1'
    end
    redis.call('RPUSH', key, unpack(tokens))
    n = n - batch
  end
  redis.call('PEXPIRE', key, WAKE_TTL_MS)
end

-- emit runs cmd on key with the fixed arguments pre, then args in chunks.
local function emit(cmd, key, pre, args, per)
  for i = 1, #args, per do
    local call = {cmd, key}
    for _, v in ipairs(pre) do
      call[#call + 1] = v
    end
    for j = i, math.min(i + per - 1, #args) do
      call[#call + 1] = args[j]
    end
    redis.call(unpack(call))
  end
end

-- flush writes the pending changes, and cleans up after every topic the
-- call emptied: a topic with no job left here leaves no counter, timer or
-- wake-up list behind (a wake-up list not given to the call expires, see
-- WAKE_TTL_MS).
local function flush()
  -- The writes go in an order that loses no job if Redis refuses one of
  -- them half-way (an ACL denying a command: Redis keeps a failed script's
  -- earlier writes): index entries are added first, records written next,
  -- old entries removed last. An entry left without a matching record is
  -- dropped by whoever reads it next.
  local adds, rems = {}, {}
  for _, key in ipairs(index_keys) do
    local a, r = {}, {}
    for m, present in pairs(index_ops[key]) do
      if present then
        a[#a + 1] = '0'
        a[#a + 1] = m
      else
        r[#r + 1] = m
      end
    end
    adds[key], rems[key] = a, r
  end
  for _, key in ipairs(index_keys) do
    emit('ZADD', key, {}, adds[key], 800)
  end
  if #timer_topics > 0 then
    local args = {}
    for _, topic in ipairs(timer_topics) do
      args[#args + 1] = int(timer_min[topic])
      args[#args + 1] = topic
    end
    emit('ZADD', TIMERS, {'LT'}, args, 400)
  end
  local writes, deletes = {}, {}
  for _, id in ipairs(dirty_ids) do
    local job = cache[id]
    if job then
      writes[#writes + 1] = id
      writes[#writes + 1] = encode(job)
    else
      deletes[#deletes + 1] = id
    end
  end
  local body_writes, body_deletes, seen = {}, {}, {}
  for _, id in ipairs(body_ids) do
    if not seen[id] then
      seen[id] = true
      local b = body_ops[id]
      if b then
        body_writes[#body_writes + 1] = id
        body_writes[#body_writes + 1] = b
      else
        body_deletes[#body_deletes + 1] = id
      end
    end
  end
  emit('HSET', BODIES, {}, body_writes, 100)
  emit('HSET', JOBS, {}, writes, 400)
  emit('HDEL', JOBS, {}, deletes, 400)
  emit('HDEL', BODIES, {}, body_deletes, 400)
  for _, key in ipairs(index_keys) do
    emit('ZREM', key, {}, rems[key], 400)
  end
  -- Increments first, so that a topic's counters never look empty halfway.
  for _, sign in ipairs({1, -1}) do
    for _, field in ipairs(tally_fields) do
      local d = tally[field]
      if d * sign > 0 then
        if redis.call('HINCRBY', COUNTS, field, d) <= 0 then
          redis.call('HDEL', COUNTS, field)
        end
      end
    end
  end
  for _, topic in ipairs(touched_topics) do
    local f = redis.call('HMGET', COUNTS, 'delay,' .. topic, 'ready,' .. topic, 'reserved,' .. topic, 'dead,' .. topic)
    if not f[1] and not f[3] then
      redis.call('ZREM', TIMERS, topic)
    end
    -- Tokens say a job is ready: with none ready, they would only lie.
    if not f[2] and WAKE[topic] then
      redis.call('DEL', WAKE[topic])
    end
    if not f[1] and not f[2] and not f[3] and not f[4] then
      redis.call('HDEL', COUNTS, 'dropped,' .. topic)
    end
  end
  for _, key in ipairs(signal_keys) do
    signal_key(key, signals[key])
  end
  cache, dirty, dirty_ids, body_ops, body_ids = {}, {}, {}, {}, {}
  index_ops, index_keys, tally, tally_fields = {}, {}, {}, {}
  timer_min, timer_topics, touched, touched_topics = {}, {}, {}, {}
  signals, signal_keys = {}, {}
end

-- unsignaled_reply lists the topics made ready without a wake-up list,
-- each with its token count, for the caller to signal (signal.lua).
local function unsignaled_reply(reply)
  reply[#reply + 1] = #unsignaled
  for _, topic in ipairs(unsignaled) do
    reply[#reply + 1] = topic
    reply[#reply + 1] = unsignaled_n[topic]
  end
  return reply
end

-- make_ready puts a job in its topic's ready index (or, with a callback,
-- in hooks) and wakes a waiter.
local function make_ready(id, job)
  move(id, job, 'ready', ready_position())
  if job.cb ~= '' then
    signal(nil, 1)
  else
    signal(job.topic, 1)
  end
end

-- drop_dead removes dead letters of a topic for good, counted as dropped.
local function drop_dead(topic, members)
  local ids = {}
  for i, m in ipairs(members) do
    ids[i] = id_of(m, DEAD)
  end
  get_many(ids)
  local dropped = 0
  for i, id in ipairs(ids) do
    local job = get(id)
    if job and job.s == 'dead' then
      remove(id, job)
      dropped = dropped + 1
    else
      index_op(DEAD, members[i], false)
    end
  end
  if dropped > 0 then
    count('dropped', topic, dropped)
    -- The partition's total, which outlives the topic's own count.
    if not tally['dropped'] then
      tally['dropped'] = 0
      tally_fields[#tally_fields + 1] = 'dropped'
    end
    tally['dropped'] = tally['dropped'] + dropped
  end
  return dropped
end

-- trim_dead enforces the dead letters' cap and time to live for a topic.
-- The pending changes must have been flushed.
local function trim_dead(topic, now)
  local expired = redis.call('ZRANGEBYLEX', DEAD, topic_min(topic), topic_until(topic, now - DEAD_TTL), 'LIMIT', 0, 100)
  local dropped = drop_dead(topic, expired)
  flush()
  local over = tonumber(redis.call('HGET', COUNTS, 'dead,' .. topic) or '0') - DEAD_MAX
  if over > 0 then
    dropped = dropped + drop_dead(topic, redis.call('ZRANGEBYLEX', DEAD, topic_min(topic), topic_max(topic), 'LIMIT', 0, over))
    flush()
  end
  return dropped
end

-- bury moves a job to its topic's dead letters; commit trims them.
local buried, buried_topics = {}, {}
local function bury(id, job, reason, now)
  job.dr, job.dt, job.q = reason, int(now), '0'
  move(id, job, 'dead', time13(now))
  if not buried[job.topic] then
    buried[job.topic] = true
    buried_topics[#buried_topics + 1] = job.topic
  end
end

-- commit flushes the call's changes, then enforces the dead letters' cap
-- and time to live on the topics that gained some.
local function commit(now)
  flush()
  for _, topic in ipairs(buried_topics) do
    trim_dead(topic, now)
  end
  buried, buried_topics = {}, {}
end

-- retry_interval_ms is the wait after delivery n failed: retry[min(n, len)]
-- of the schedule, 0 without one.
local function retry_interval_ms(schedule, n)
  if schedule == '' then
    return 0
  end
  local list = {}
  for v in string.gmatch(schedule, '[^,]+') do
    list[#list + 1] = tonumber(v)
  end
  if n > #list then
    n = #list
  end
  if n < 1 then
    n = 1
  end
  return list[n] * 1000
end

-- attempts_limit is the job's limit on deliveries; 0 is unlimited. With a
-- schedule and no explicit limit, the job gets one more than its retries.
local function attempts_limit(job)
  local m = tonumber(job.m)
  if m > 0 then
    return m
  end
  if job.retry ~= '' then
    local n = 1
    for _ in string.gmatch(job.retry, ',') do
      n = n + 1
    end
    return n + 1
  end
  return 0
end

-- fail_delivery ends a reserved job's delivery as failed at end_ms: to the
-- dead letters when its attempts are used up, else scheduled by its retry
-- schedule (or override_ms) and ready at once when that time has come.
-- Returns the new state. Dead jobs are trimmed by the caller, after a
-- flush (see trim_dead).
local function fail_delivery(id, job, reason, end_ms, override_ms, now)
  local limit = attempts_limit(job)
  job.q = '0'
  if limit > 0 and job.a >= limit then
    bury(id, job, reason, now)
    return 'dead'
  end
  local due = math.max(end_ms + (override_ms or retry_interval_ms(job.retry, job.a)), now)
  job.d = int(due)
  if due <= now then
    make_ready(id, job)
    return 'ready'
  end
  move(id, job, 'delay', time13(due))
  return 'delay'
end

-- held_delivery reads a job a consumer acts on by its delivery (release,
-- touch): it returns the job, or a refusal reply {status, state or '', 0}:
-- 0 unknown id, -1 not reserved (the state given), -2 stale delivery
-- (attempt, when not '0', is not the job's current one).
local function held_delivery(id, attempt)
  local job = get(id)
  if not job then
    return nil, {0, '', 0}
  end
  if job.s ~= 'reserved' then
    return nil, {-1, job.s, 0}
  end
  if attempt ~= '0' and attempt ~= int(job.a) then
    return nil, {-2, job.s, 0}
  end
  return job, nil
end

-- remove_jobs removes the jobs whose ids are ARGV[first..] (finish.lua,
-- delete.lua). With keep_dead, a dead-lettered job is left alone. Reply:
-- per id, a status (1 removed, 0 unknown, -1 dead-lettered and kept) and
-- the job's topic ('' when unknown). An id given twice is unknown the
-- second time, as if the removals ran one after the other.
local function remove_jobs(first, keep_dead)
  local ids = {}
  for i = first, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
  get_many(ids)
  local reply = {}
  for _, id in ipairs(ids) do
    local job = get(id)
    local status, topic = 0, ''
    if job then
      topic = job.topic
      if keep_dead and job.s == 'dead' then
        status = -1
      else
        remove(id, job)
        status = 1
      end
    end
    reply[#reply + 1] = status
    reply[#reply + 1] = topic
  end
  flush()
  return reply
end

-- dead_ids is the n oldest dead letters of a topic.
local function dead_ids(topic, n)
  local members = redis.call('ZRANGEBYLEX', DEAD, topic_min(topic), topic_max(topic), 'LIMIT', 0, n)
  local ids = {}
  for i, m in ipairs(members) do
    ids[i] = id_of(m, DEAD)
  end
  return ids
end

-- view is a job as a flat list of its fields, for the server to read
-- (get.lua): the order is the contract with the view constants of job.go.
local function view(id, job)
  return {id, job.topic, job.s, int(job.a), job.d, job.x, job.r, job.c, job.m, job.retry, job.cb,
    job.dr, job.dt, job.ls, job.le, job.lb, body_of(id, job)}
end
