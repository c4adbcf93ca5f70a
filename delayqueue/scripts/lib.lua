-- lib.lua: what the scripts share, in sections. scripts.go assembles each
-- script from the sections its first line names ("-- lib: ready dead"),
-- with the sections those need, in this file's order, then the script;
-- record and state come first in every one. A section starts at its
-- "-- section <name>, needs <names>" line.
--
-- The scripts reach Redis as functions of one library (FUNCTION LOAD,
-- FCALL) where Redis has them, and else each as a script of its own
-- (EVALSHA). A library's top level runs once, at load, where Lua's own
-- functions are not yet at hand; a script's runs on every call. So the top
-- level of a section holds only declarations: functions, constants (a
-- string or a number), and the names of per-call state with no value.
-- Per-call state is set by its section's begin_<section> function, after
-- the section's last declaration, which every call runs first (scripts.go
-- checks all of that).
--
-- As a script of its own, Lua creates every function anew on each call,
-- and that is a good part of a small call's cost: a script gets only the
-- sections it names, and of those only the functions its code calls
-- (scripts.go drops the others).

-- section record
-- The partition's keys, the clock, and the job record.
--
-- A script works on one partition and touches only keys passed in KEYS,
-- all of which carry the partition's hash tag. KEYS[1..10] are always the
-- partition's keys, in this order (keys.go builds them):
--   1 jobs      HASH id -> the job's record (see decode)
--   2 ready     ZSET, every score 0, members "topic,<position>,id": jobs to
--               pop, per topic in the order they became ready
--   3 delayed   ZSET (scores 0) "topic,<due ms>,id"; a job with flag 4
--               (see the record) has "topic,<due ms>~,id" here and
--               "topic,<position>~,id" in ready, so that the scanner moves
--               its due entry to ready as it is, without its record
--   4 reserved  ZSET (scores 0) "topic,<lease end ms>,id"
--   5 dead      ZSET (scores 0) "topic,<death ms>,id"
--   6 hooks     ZSET (scores 0) "<position>,id": ready jobs with a callback,
--               for the webhook dispatchers, never for /pop
--   7 timers    ZSET "delay,<topic>" -> ms: no delayed job of the topic
--               here is due before that time (a lower bound the scanner
--               raises); "reserved,<topic>" the same for its leases
--   8 counts    HASH "<state>,<topic>" -> jobs in that state; "dropped,<topic>"
--               -> its dead letters dropped over the cap or the ttl, while
--               it has dead letters; "dropped" -> all dropped; "seq" -> the
--               last ready position handed out
--   9 bodies    HASH id -> body, for bodies longer than BODY_INLINE bytes
--   10 hookwake LIST of tokens that wake the webhook dispatchers
--   11.. the wake-up lists of the topics named in the ARGV header: LISTs of
--               tokens that wake this partition's held pops of the topic
-- Times are zero-padded to 13 digits, so that the members of a topic sort
-- by them. A ready position is the time the job became ready: its due
-- time, or now followed by "." and a sequence number (16 digits) that
-- keeps the jobs made ready in one ms in order; positions written before
-- this form are 16-digit sequence numbers, which sort first. A topic
-- holds no comma (push refuses one), so "topic," starts exactly the
-- members of that topic.
--
-- Every script receives the same ARGV header; its own arguments start at
-- ARGV[ARG]:
--   1 wake-up token cap per list
--   2 dead letters kept per topic in this partition, 3 their time to live ms
--   4 n, then 5..4+n the topics whose wake-up lists are KEYS[11..10+n]
--
-- WAKE maps those topics to their wake-up lists' keys.
local WAKE, ARG

-- clock reads the one clock every instance shares, Redis TIME, once per
-- call: now in ms rounded down, and rounded up (for due times: a job is
-- never early), and in microseconds (for the server's timers: a scanner
-- that slept from the ms rounded down would wake up to a ms late).
local clock_ms, clock_ceil, clock_us

local function clock()
  if not clock_ms then
    local t = redis.call('TIME')
    local sec, us = tonumber(t[1]), tonumber(t[2])
    local s = sec * 1000
    clock_ms, clock_ceil = s + math.floor(us / 1000), s + math.ceil(us / 1000)
    clock_us = sec * 1000000 + us
  end
  return clock_ms, clock_ceil, clock_us
end

-- int renders a number as a decimal integer string (Redis' Lua and
-- miniredis' Lua print large numbers differently; this prints both alike),
-- and num reads one. Commands get their numbers as strings: Redis prints a
-- number argument as a float, which costs a small command as much as its
-- own work. Lua prints a number in a concatenation with sprintf too, and
-- reads one with strtod: a few thousand instructions each, more than the
-- rest of a small call's line. Most numbers a call prints or reads are
-- small and few distinct (lengths, flags, counts, attempts, ttr), so the
-- small ones are converted once and kept: small_text maps a number below
-- SMALL_INT to its text, small_number a text of up to 6 characters to its
-- number (at most SMALL_TEXTS of them). As a library (FUNCTION), these two
-- tables last from one call to the next, which is safe: they hold nothing
-- but conversions, the same for every call. As scripts of their own, each
-- call starts them empty.
local SMALL_INT, SMALL_TEXTS = 8192, 8192
local small_text, small_number, small_numbers

local function int(n)
  local s = small_text[n]
  if not s then
    s = string.format('%d', n) -- n may be a numeric string too: not kept
    if type(n) == 'number' and n >= 0 and n < SMALL_INT then
      small_text[n] = s
    end
  end
  return s
end

local function num(s)
  local n = small_number[s]
  if not n then
    n = tonumber(s)
    if n and type(s) == 'string' and #s <= 6 and small_numbers < SMALL_TEXTS then
      small_number[s] = n
      small_numbers = small_numbers + 1
    end
  end
  return n
end

local function begin_record()
  small_text, small_number, small_numbers = small_text or {}, small_number or {}, small_numbers or 0
  WAKE, ARG = {}, 5 + num(ARGV[4])
  for i = 1, ARG - 5 do
    WAKE[ARGV[4 + i]] = KEYS[10 + i]
  end
  clock_ms, clock_ceil, clock_us = nil, nil, nil
end

local function time13(ms)
  return string.format('%013d', ms)
end

-- The job record, one string. Its head holds what most calls need, its
-- tail what some read and none changes, so that a call parses the tail
-- only when it needs it (a table and a string per field cost more than the
-- rest of a small call):
--   state,attempts,due,pos,flags,#topic,#extra:<topic><extra><tail>
--   tail:  ttr,created,max,#retry,#callback,#body:<retry><callback><body>
--   extra: readypos,deadat,status,#reason,#error:<reason><error><response>
-- state is delay|ready|reserved|dead; due the time the job was or will be
-- ready (ms); pos its place in its state's index (due, ready position,
-- lease end or death time); flags 1 when it has a callback (its JSON in
-- callback), plus 2 when its body is in BODIES (#body is -1 then), plus 4
-- when its delay and ready entries end their position with "~" (every job
-- without a callback since this form; see KEYS[3]): such a record may
-- still say delay after the scanner moved its entry to ready, and settle
-- tells the two apart; ttr in
-- seconds; created ms; max its max attempts (0 none given); retry the
-- schedule, comma-separated seconds. extra holds what only some jobs have:
-- the ready position a reserved job came from (to give it back in place),
-- and for dead and failed webhook jobs the death time and reason and the
-- last call's status, error and answer.
--
-- decode gives a table of the head's fields (topic, a string), with
-- rawextra and rawtail; tail(job) and extra(job) add their fields when a
-- call needs them. A job made anew has every field, and rawtail nil.
-- The hot paths (claim, finish, delete, push) read and write records
-- without decoding them into a table, which costs more than the rest of
-- their work: HEAD matches a record's head, and record builds one.
local HEAD = '^(%a+),(%d+),(%d+),([%d.]+),(%d),(%d+),(%d+):()'

-- (tl and xl, the lengths of topic and extra as text, save printing them
-- when the caller has them.)
local function record(s, a, d, x, f, topic, extra, tail, tl, xl)
  return s .. ',' .. a .. ',' .. d .. ',' .. x .. ',' .. f .. ',' .. (tl or int(#topic)) .. ',' .. (xl or int(#extra)) .. ':' ..
    topic .. extra .. tail
end

local function decode(raw)
  if not raw then
    return nil
  end
  local s, a, d, x, f, tl, xl, at = string.match(raw, HEAD)
  if not s then
    return nil
  end
  local t_end = at + tl
  local x_end = t_end + xl
  return {s = s, a = a, d = d, x = x, f = num(f), topic = string.sub(raw, at, t_end - 1),
    rawextra = xl ~= '0' and string.sub(raw, t_end, x_end - 1) or '', rawtail = string.sub(raw, x_end)}
end

-- has_callback and separate_body read the flags.
local function has_callback(job)
  return job.f % 2 == 1
end

local function separate_body(job)
  return job.f % 4 >= 2
end

-- tail adds the tail's fields to a decoded job: r, c, m, retry, cb and
-- (when kept in the record) body.
local function tail(job)
  local raw = job.rawtail
  if not raw or job.r then
    return job
  end
  local r, c, m, rl, cl, bl, at = string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%-?%d+):()')
  local r_end = at + rl
  local c_end = r_end + cl
  job.r, job.c, job.m = r, c, m
  job.retry = rl ~= '0' and string.sub(raw, at, r_end - 1) or ''
  job.cb = cl ~= '0' and string.sub(raw, r_end, c_end - 1) or ''
  if bl ~= '-1' then
    job.body = string.sub(raw, c_end)
  end
  return job
end

-- extra adds the extra part's fields to a job: q, dt, ls, dr, le, lb; a
-- job whose extra was read is written with them.
local function extra(job)
  if job.q then
    return job
  end
  local raw = job.rawextra
  if raw == '' then
    job.q, job.dt, job.ls, job.dr, job.le, job.lb = '0', '0', '0', '', '', ''
    return job
  end
  local q, dt, ls, drl, lel, at = string.match(raw, '^([%d.]+),(%d+),(%d+),(%d+),(%d+):()')
  drl, lel = num(drl), num(lel)
  job.q, job.dt, job.ls = q, dt, ls
  job.dr = string.sub(raw, at, at + drl - 1)
  job.le = string.sub(raw, at + drl, at + drl + lel - 1)
  job.lb = string.sub(raw, at + drl + lel)
  return job
end

-- encode writes a job back: the parts a call did not read as they were.
local function encode(job)
  local x = job.rawextra
  if job.q then
    x = ''
    if job.q ~= '0' or job.dt ~= '0' or job.ls ~= '0' or job.dr ~= '' or job.le ~= '' or job.lb ~= '' then
      x = job.q .. ',' .. job.dt .. ',' .. job.ls .. ',' .. int(#job.dr) .. ',' .. int(#job.le) .. ':' .. job.dr .. job.le .. job.lb
    end
  end
  local t = job.rawtail
  if not t then
    local body, bl = job.body, '-1'
    if separate_body(job) then
      body = ''
    else
      bl = int(#body)
    end
    t = job.r .. ',' .. job.c .. ',' .. job.m .. ',' .. int(#job.retry) .. ',' .. int(#job.cb) .. ',' .. bl .. ':' ..
      job.retry .. job.cb .. body
  end
  local a = job.a
  if type(a) == 'number' then
    a = int(a)
  end
  return job.s .. ',' .. a .. ',' .. job.d .. ',' .. job.x .. ',' .. int(job.f) .. ',' .. int(#job.topic) .. ',' ..
    int(#x) .. ':' .. job.topic .. x .. t
end

-- index_for is the index holding a job in state s (with flags f), and
-- member_for its entry there; index_of and member take a decoded job.
local function index_for(s, f)
  if s == 'ready' then
    if f % 2 == 1 then
      return KEYS[6]
    end
    return KEYS[2]
  elseif s == 'delay' then
    return KEYS[3]
  elseif s == 'reserved' then
    return KEYS[4]
  end
  return KEYS[5]
end

local function member_for(id, s, x, topic, f)
  if s == 'ready' and f % 2 == 1 then
    return x .. ',' .. id
  end
  if f >= 4 and (s == 'delay' or s == 'ready') then
    return topic .. ',' .. x .. '~,' .. id
  end
  return topic .. ',' .. x .. ',' .. id
end

local function index_of(job)
  return index_for(job.s, job.f)
end

local function member(id, job)
  return member_for(id, job.s, job.x, job.topic, job.f)
end


-- id_of is the id in an index member: after the position in hooks, after
-- the topic and the position in the other indexes.
local function id_of(m, key)
  local at = string.find(m, ',', 1, true)
  if key ~= KEYS[6] then
    at = string.find(m, ',', at + 1, true)
  end
  return string.sub(m, at + 1)
end

-- topic_range returns ZRANGEBYLEX bounds of a topic's members: all of
-- them, or (with ms) those whose time is at most ms.
local function topic_range(topic, ms)
  if ms then
    return '[' .. topic .. ',', '(' .. topic .. ',' .. time13(ms + 1) .. ','
  end
  return '[' .. topic .. ',', '(' .. topic .. '-' -- '-' follows ','
end

-- section state, needs record
-- Reading and changing jobs, gathered and written by flush.
--
-- A call's changes are gathered here and written by flush, with one
-- command per key where it can: batches of a thousand jobs cost a handful
-- of commands, not thousands. Reads go through get, which sees the call's
-- own pending writes, so an id met twice in one call behaves as if the two
-- changes ran one after the other.
--
-- cache maps an id to its job: a decoded table, its record as a string
-- (read and not decoded, or written by a hot path), or false when it has
-- none; dirty lists the ids whose record to write (or delete), in order.
-- pend holds the
-- other pending changes, each an ordered map (a key's first write appends
-- it to the array part), made when first needed: index[key] (member ->
-- present), bodies (id -> body, or false to delete), counts ("<state>,
-- <topic>" -> delta), timers ("delay|reserved,<topic>" -> earliest time),
-- signals (wake-up list -> tokens) and unsignaled (topic -> tokens, for topics whose wake-up list
-- the call was not given).
local cache, dirty, pend

-- note sets m[k] = v, listing k in m's array part the first time.
local function note(m, k, v)
  if m[k] == nil then
    m[#m + 1] = k
  end
  m[k] = v
end

-- pending returns pend[name], made empty when first asked for.
local function pending(name)
  local m = pend[name]
  if not m then
    m = {}
    pend[name] = m
  end
  return m
end

-- settle returns a record as the call reads it: one with flag 4 that says
-- delay while its entry is in ready already (the scanner moved the entry
-- as it is, see KEYS[3]) reads as ready, its due time its position. That
-- costs a ZSCORE per such record; claim.lua, which reads only jobs whose
-- entries it found in ready, turns it off (settle_reads).
local settle_reads
local function settle(id, raw)
  -- 'd' then 'l': delay (dead has 'a'), read without making a string.
  if not settle_reads or not raw or string.byte(raw, 1) ~= 100 or string.byte(raw, 3) ~= 108 then
    return raw
  end
  local _, _, _, x, f, tl, _, at = string.match(raw, HEAD)
  if f and f >= '4' and redis.call('ZSCORE', KEYS[2], string.sub(raw, at, at + tl - 1) .. ',' .. x .. '~,' .. id) then
    return 'ready' .. string.sub(raw, 6)
  end
  return raw
end

-- get_raw returns a job's record as a string, or nil when it has none,
-- or false when the call holds it decoded (then use get).
local function get_raw(id)
  local job = cache[id]
  if job == nil then
    job = settle(id, redis.call('HGET', KEYS[1], id)) or false
    cache[id] = job
  end
  if type(job) == 'table' then
    return false
  end
  return job or nil
end

-- get returns a job decoded (a table the call may change, then put), or
-- nil when it has none.
local function get(id)
  local job = cache[id]
  if job == nil then
    job = settle(id, redis.call('HGET', KEYS[1], id)) or false
  end
  if type(job) == 'string' then
    job = decode(job) or false
  end
  cache[id] = job
  return job or nil
end

-- get_many loads the ids not cached yet with HMGET, 500 at a time. One id
-- is left to get_raw or get: HGET costs a call less than the list.
local function get_many(ids)
  if #ids < 2 then
    return
  end
  local missing = {}
  for _, id in ipairs(ids) do
    if cache[id] == nil then
      missing[#missing + 1] = id
    end
  end
  for i = 1, #missing, 500 do
    local last = math.min(i + 499, #missing)
    local raws = redis.call('HMGET', KEYS[1], unpack(missing, i, last))
    for j = i, last do
      cache[missing[j]] = settle(missing[j], raws[j - i + 1]) or false
    end
  end
end

-- put marks a job's record to be written: job is a table, a record string,
-- or false to delete it.
local function put(id, job)
  note(dirty, id, true)
  cache[id] = job
end

-- index_op notes an index entry added (present true) or removed; the
-- pending index lists the indexes it changes in its array part.
local function index_op(key, m, present)
  local index = pending('index')
  local ops = index[key]
  if not ops then
    ops = {}
    note(index, key, ops)
  end
  ops[m] = present
end

-- move_entries notes index entries a hot path moved without index_op,
-- as lists of one entry per job: added, ZADD arguments ('0', member, ...)
-- for index to; removed, members of index from. flush writes them with
-- its own, in its order.
local function move_entries(from, removed, to, added)
  pend.moved = {from, removed, to, added}
end

local function count(field, delta)
  local counts = pending('counts')
  note(counts, field, (counts[field] or 0) + delta)
end

-- lower_timer brings a timer ("delay|reserved,<topic>") down to ms when
-- the flush writes it (ZADD LT), if the call has not a lower time for it.
-- text, when the caller has it, is ms as text (timer_texts keeps it), so
-- that the flush need not print it.
local function lower_timer(timer, ms, text)
  local timers = pending('timers')
  if not timers[timer] or ms < timers[timer] then
    note(timers, timer, ms)
    pending('timer_texts')[timer] = text or false
  end
end

-- raise_timer sets a timer to its next time ms, or removes it (ms nil),
-- when the flush writes it: after the records, since a timer raised past a
-- job's entry stops the scanner looking at that entry. A time the call
-- lowered the timer to (lower_timer) still wins when it is earlier.
local function raise_timer(timer, ms)
  note(pending('raised'), timer, ms or false)
end

-- enter puts a job in the index of its state, and leave takes it out, each
-- counting it there. (enter_as takes ms, x as a number, when the caller
-- has it.)
local function enter_as(id, s, x, topic, f, ms)
  index_op(index_for(s, f), member_for(id, s, x, topic, f), true)
  count(s .. ',' .. topic, 1)
  if s == 'delay' or s == 'reserved' then
    -- Its timer is named as its counter is; x is its time, as text.
    lower_timer(s .. ',' .. topic, ms or tonumber(x), x)
  end
end

local function leave_as(id, s, x, topic, f)
  index_op(index_for(s, f), member_for(id, s, x, topic, f), false)
  count(s .. ',' .. topic, -1)
end

local function enter(id, job)
  enter_as(id, job.s, job.x, job.topic, job.f)
end

local function leave(id, job)
  leave_as(id, job.s, job.x, job.topic, job.f)
end

-- Bodies up to this many bytes live in the job's record; longer ones in
-- BODIES, so that a state change does not copy them.
local BODY_INLINE = 4096

-- create stores a new job: job has every field but f and body, and cb
-- is its callback or ''.
local function create(id, job, body)
  job.f = job.cb ~= '' and 1 or 4
  job.body = body
  if #body > BODY_INLINE then
    job.f = job.f + 2
    note(pending('bodies'), id, body)
  end
  -- A replaced job's separate body was marked for deletion by remove.
  put(id, job)
  enter(id, job)
end

-- remove deletes a job and every trace of it.
local function remove(id, job)
  leave(id, job)
  put(id, false)
  if separate_body(job) then
    note(pending('bodies'), id, false)
  end
end

-- remove_raw is remove for a record not decoded: it reads only the head.
-- It returns the job's state and topic.
local function remove_raw(id, raw)
  local s, _, _, x, f, tl, _, at = string.match(raw, HEAD)
  local topic = string.sub(raw, at, at + tl - 1)
  f = num(f)
  leave_as(id, s, x, topic, f)
  put(id, false)
  if f % 4 >= 2 then
    note(pending('bodies'), id, false)
  end
  return s, topic
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
  if not separate_body(job) then
    return tail(job).body
  end
  local bodies = pend.bodies
  if bodies and bodies[id] then
    return bodies[id]
  end
  return redis.call('HGET', KEYS[9], id) or ''
end

-- signal leaves n wake-up tokens for the held pops of topic (or, with
-- topic nil, for the webhook dispatchers) when the call flushes; a topic
-- whose wake-up list the call was not given goes to unsignaled, for the
-- caller to signal (signal.lua).
local function signal(topic, n)
  local key = KEYS[10]
  if topic then
    key = WAKE[topic]
    if not key then
      local u = pending('unsignaled')
      note(u, topic, (u[topic] or 0) + n)
      return
    end
  end
  local s = pending('signals')
  note(s, key, (s[key] or 0) + n)
end

-- A wake-up list expires this long after it was made: tokens only wake,
-- so a list nobody pops from must not stay behind. (Waiters empty a list
-- they pop from, and the next token makes it anew.)
local WAKE_TTL_MS = '60000'

-- signal_key adds up to n tokens to a wake-up list, which keeps at most
-- the cap (ARGV[1]).
local function signal_key(key, n)
  local len = redis.call('LLEN', key)
  local room = num(ARGV[1]) - len
  if n > room then
    n = room
  end
  if n <= 0 then
    return
  end
  if n == 1 then
    redis.call('RPUSH', key, '1')
  else
    local tokens = {}
    for i = 1, math.min(n, 200) do
      tokens[i] = '1'
    end
    while n > 0 do
      local batch = math.min(n, 200)
      redis.call('RPUSH', key, unpack(tokens, 1, batch))
      n = n - batch
    end
  end
  if len == 0 then
    redis.call('PEXPIRE', key, WAKE_TTL_MS)
  end
end

-- emit runs cmd on key with the fixed arguments pre (0 to 2), then args in
-- chunks of per.
local function emit(cmd, key, pre1, pre2, args, per)
  local n = #args
  for i = 1, n, per do
    -- min(i + per - 1, n), without math.min's C call
    local last = i + per - 1
    if last > n then
      last = n
    end
    if pre2 then
      redis.call(cmd, key, pre1, pre2, unpack(args, i, last))
    elseif pre1 then
      redis.call(cmd, key, pre1, unpack(args, i, last))
    else
      redis.call(cmd, key, unpack(args, i, last))
    end
  end
end

-- write_index writes the pending index changes (see index_op): with
-- adding, the entries added (ZADD, every score 0), else those removed
-- (ZREM).
local function write_index(index, adding)
  if not index then
    return
  end
  for _, key in ipairs(index) do
    local args = {}
    for m, present in pairs(index[key]) do
      if present == adding then
        if adding then
          args[#args + 1] = '0'
        end
        args[#args + 1] = m
      end
    end
    if adding then
      emit('ZADD', key, nil, nil, args, 800)
    else
      emit('ZREM', key, nil, nil, args, 400)
    end
  end
end

-- flush writes the pending changes, in an order that loses no job if Redis
-- refuses one of them half-way (an ACL denying a command: Redis keeps a
-- failed script's earlier writes): index entries are added and timers
-- lowered first, records written next, old entries removed and timers
-- raised last; an entry left without a matching record is dropped by
-- whoever reads it next. Then it cleans up after the
-- topics the call emptied here: no counter, timer or wake-up list stays
-- (a wake-up list the call was not given expires, see WAKE_TTL_MS).
-- It returns the counters it changed, each field with its new value.
local function flush()
  local index, moved = pend.index, pend.moved
  write_index(index, true)
  if moved then
    emit('ZADD', moved[3], nil, nil, moved[4], 800)
  end
  local timers = pend.timers
  if timers then
    local args, texts = {}, pend.timer_texts
    for _, topic in ipairs(timers) do
      args[#args + 1] = texts[topic] or int(timers[topic])
      args[#args + 1] = topic
    end
    emit('ZADD', KEYS[7], 'LT', nil, args, 400)
  end
  local writes, deletes = {}, {}
  for _, id in ipairs(dirty) do
    local job = cache[id]
    if job then
      writes[#writes + 1] = id
      if type(job) == 'table' then
        writes[#writes + 1] = encode(job)
      else
        writes[#writes + 1] = job
      end
    else
      deletes[#deletes + 1] = id
    end
  end
  local bodies, body_deletes = pend.bodies, nil
  if bodies then
    local body_writes = {}
    body_deletes = {}
    for _, id in ipairs(bodies) do
      if bodies[id] then
        body_writes[#body_writes + 1] = id
        body_writes[#body_writes + 1] = bodies[id]
      else
        body_deletes[#body_deletes + 1] = id
      end
    end
    emit('HSET', KEYS[9], nil, nil, body_writes, 100)
  end
  emit('HSET', KEYS[1], nil, nil, writes, 400)
  emit('HDEL', KEYS[1], nil, nil, deletes, 400)
  if body_deletes then
    emit('HDEL', KEYS[9], nil, nil, body_deletes, 400)
  end
  write_index(index, false)
  if moved then
    emit('ZREM', moved[1], nil, nil, moved[2], 400)
  end
  local raised = pend.raised
  if raised then
    for _, timer in ipairs(raised) do
      local ms, lowered = raised[timer], timers and timers[timer]
      if lowered and (not ms or lowered < ms) then
        ms = lowered
      end
      if ms then
        redis.call('ZADD', KEYS[7], int(ms), timer)
      else
        redis.call('ZREM', KEYS[7], timer)
      end
    end
  end
  -- Increments first, so that a topic's counters never look empty halfway.
  -- A counter down to 0 goes, and what the topic kept for that state with
  -- it: its wake-up tokens with its last ready job, its timer for delayed
  -- jobs or leases with the last of those, its dropped dead letters' count
  -- with its last dead letter. Each is named by the counter's field, so
  -- none needs a read.
  local counts, left = pend.counts, {}
  if counts then
    for sign = 1, -1, -2 do
      for _, field in ipairs(counts) do
        local d = counts[field]
        local n = d * sign > 0 and redis.call('HINCRBY', KEYS[8], field, d == 1 and '1' or d == -1 and '-1' or int(d))
        left[field] = n or left[field]
        if n and n <= 0 then
          redis.call('HDEL', KEYS[8], field)
          local state, topic = string.match(field, '^(%a+),(.*)$')
          if state == 'ready' then
            -- Tokens say a job is ready: with none, they would only lie.
            if WAKE[topic] then
              redis.call('DEL', WAKE[topic])
            end
          elseif state == 'delay' or state == 'reserved' then
            redis.call('ZREM', KEYS[7], field)
          elseif state == 'dead' then
            redis.call('HDEL', KEYS[8], 'dropped,' .. topic)
          end
        end
      end
    end
  end
  local signals = pend.signals
  if signals then
    for _, key in ipairs(signals) do
      signal_key(key, signals[key])
    end
  end
  cache, dirty = {}, {}
  pend = {unsignaled = pend.unsignaled}
  return left
end

-- unsignaled_reply appends to reply the topics made ready whose wake-up
-- list the call was not given, each with its token count: "n, then n
-- pairs topic, tokens", for the caller to signal (signal.lua).
local function unsignaled_reply(reply)
  local u = pend.unsignaled or {}
  reply[#reply + 1] = #u
  for _, topic in ipairs(u) do
    reply[#reply + 1] = topic
    reply[#reply + 1] = u[topic]
  end
  return reply
end

local function begin_state()
  cache, dirty, pend, settle_reads = {}, {}, {}, true
end

-- section ready, needs state
-- Making jobs ready.

-- A ready position made now is the call's time, "." and a number from one
-- counter per partition (counts' "seq"), so that a topic's jobs pop in the
-- order they became ready (see KEYS). A call takes a few numbers at a
-- time: most make one or a few jobs ready. With at_ms, the position is at
-- that time instead (migratev1.lua: an older layout's ready jobs keep their
-- order).
local positions_left, next_position, position_prefix
local function ready_position(at_ms)
  if positions_left == 0 then
    positions_left = 64
    next_position = redis.call('HINCRBY', KEYS[8], 'seq', '64') - positions_left
    position_prefix = time13(clock()) .. '.'
  end
  positions_left = positions_left - 1
  next_position = next_position + 1
  return (at_ms and time13(at_ms) .. '.' or position_prefix) .. string.format('%016d', next_position)
end

-- make_ready puts a job in its topic's ready index (or, with a callback,
-- in hooks) and wakes a waiter.
local function make_ready(id, job)
  move(id, job, 'ready', ready_position())
  if has_callback(job) then
    signal(nil, 1)
  else
    signal(job.topic, 1)
  end
end

local function begin_ready()
  positions_left, next_position, position_prefix = 0, 0, nil
end

-- section dead, needs state
-- Dead letters.

-- drop_dead removes dead letters of a topic for good, counted as dropped.
local function drop_dead(topic, members)
  local ids = {}
  for i, m in ipairs(members) do
    ids[i] = id_of(m, KEYS[5])
  end
  get_many(ids)
  local dropped = 0
  for i, id in ipairs(ids) do
    local job = get(id)
    if job and job.s == 'dead' then
      remove(id, job)
      dropped = dropped + 1
    else
      index_op(KEYS[5], members[i], false)
    end
  end
  if dropped > 0 then
    count('dropped,' .. topic, dropped)
    -- The partition's total, which outlives the topic's own count.
    count('dropped', dropped)
  end
  return dropped
end

-- trim_dead enforces the dead letters' cap (ARGV[2]) and time to live
-- (ARGV[3]) for a topic. The pending changes must have been flushed.
local function trim_dead(topic, now)
  local lo, hi = topic_range(topic, now - tonumber(ARGV[3]))
  local dropped = drop_dead(topic, redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', '0', '100'))
  flush()
  local over = tonumber(redis.call('HGET', KEYS[8], 'dead,' .. topic) or '0') - tonumber(ARGV[2])
  if over > 0 then
    lo, hi = topic_range(topic)
    dropped = dropped + drop_dead(topic, redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', '0', int(over)))
    flush()
  end
  return dropped
end

-- bury moves a job to its topic's dead letters; commit trims them.
local buried
local function bury(id, job, reason, now)
  extra(job)
  job.dr, job.dt, job.q = reason, int(now), '0'
  move(id, job, 'dead', time13(now))
  note(buried, job.topic, true)
end

-- commit flushes the call's changes, then enforces the dead letters' cap
-- and time to live on the topics that gained some.
local function commit(now)
  flush()
  for _, topic in ipairs(buried) do
    trim_dead(topic, now)
  end
  buried = {}
end

-- dead_ids is the n oldest dead letters of a topic.
local function dead_ids(topic, n)
  local lo, hi = topic_range(topic)
  local members = redis.call('ZRANGEBYLEX', KEYS[5], lo, hi, 'LIMIT', '0', int(n))
  for i, m in ipairs(members) do
    members[i] = id_of(m, KEYS[5])
  end
  return members
end

local function begin_dead()
  buried = {}
end

-- section retry, needs ready dead
-- A delivery that failed (its lease ran out, a release, a
-- webhook call that failed).

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
  return list[math.max(1, math.min(n, #list))] * 1000
end

-- attempts_limit is the job's limit on deliveries; 0 is unlimited. With a
-- schedule and no explicit limit, the job gets one more than its retries.
local function attempts_limit(job)
  tail(job)
  local m = tonumber(job.m)
  if m > 0 or job.retry == '' then
    return m
  end
  local _, commas = string.gsub(job.retry, ',', '')
  return commas + 2
end

-- fail_delivery ends a reserved job's delivery as failed at end_ms: to the
-- dead letters when its attempts are used up, else scheduled by its retry
-- schedule (or override_ms) and ready at once when that time has come.
-- Returns the new state. The caller commits (dead letters are trimmed).
local function fail_delivery(id, job, reason, end_ms, override_ms, now)
  local limit, attempts = attempts_limit(job), tonumber(job.a)
  extra(job).q = '0'
  if limit > 0 and attempts >= limit then
    bury(id, job, reason, now)
    return 'dead'
  end
  local due = math.max(end_ms + (override_ms or retry_interval_ms(job.retry, attempts)), now)
  job.d = int(due)
  if due <= now then
    make_ready(id, job)
    return 'ready'
  end
  move(id, job, 'delay', time13(due))
  return 'delay'
end

-- section held, needs state
-- A job acted on by its delivery (release, touch, unclaim, and finish
-- with a receipt).

-- held_delivery reads it and checks it: it returns the job, or a refusal
-- reply {status, state or '', 0}: 0 unknown id, -1 not reserved (the
-- state given), -2 stale delivery (attempt, when not '0', is not the job's
-- current one; or created, when given and not '', is not the job's
-- creation time in ms: the job was pushed again since, and its attempts
-- counted again from 1).
local function held_delivery(id, attempt, created)
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
  if created and created ~= '' and tail(job).c ~= created then
    return nil, {-2, job.s, 0}
  end
  return job, nil
end

-- section remove, needs state
-- Jobs removed by id.

-- remove_ids removes the jobs whose ids are ARGV[first..last], leaving the
-- writes to the caller's flush (claim.lua finishes some, then claims, and
-- flushes both at once: a topic's counters change once). With keep_dead,
-- a dead-lettered job is left alone. Reply:
-- per id, a status (1 removed, 0 unknown, -1 dead-lettered and kept) and
-- the job's topic ('' when unknown). An id given twice is unknown the
-- second time, as if the removals ran one after the other.
local function remove_ids(first, last, keep_dead)
  local ids = {unpack(ARGV, first, last)}
  get_many(ids)
  local reply = {}
  for _, id in ipairs(ids) do
    local status, topic = 0, ''
    local raw = get_raw(id)
    if raw then
      if keep_dead and string.sub(raw, 1, 5) == 'dead,' then
        status = -1
        local _, _, _, _, _, tl, _, at = string.match(raw, HEAD)
        topic = string.sub(raw, at, at + tl - 1)
      else
        _, topic = remove_raw(id, raw)
        status = 1
      end
    elseif raw == false then
      local job = get(id)
      if job then
        topic = job.topic
        if keep_dead and job.s == 'dead' then
          status = -1
        else
          remove(id, job)
          status = 1
        end
      end
    end
    reply[#reply + 1] = status
    reply[#reply + 1] = topic
  end
  return reply
end

-- remove_jobs is remove_ids for ARGV[first..] (finish.lua, delete.lua),
-- flushed.
local function remove_jobs(first, keep_dead)
  local reply = remove_ids(first, #ARGV, keep_dead)
  flush()
  return reply
end

-- section view, needs state
-- Jobs as the server reads them.

-- view is a job as a flat list of its fields (get.lua): the order is the
-- contract with the view constants of job.go.
local function view(id, job)
  tail(job)
  extra(job)
  return {id, job.topic, job.s, int(job.a), job.d, job.x, job.r, job.c, job.m, job.retry, job.cb,
    job.dr, job.dt, job.ls, job.le, job.lb, body_of(id, job)}
end
