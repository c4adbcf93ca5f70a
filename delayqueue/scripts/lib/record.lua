-- record.lua: the partition's keys, the clock, and the job record; every
-- script starts with it (scripts.go assembles each script from the lib
-- sections it names on its "-- lib:" line, in this directory's order:
-- record, state, ready, dead, retry, held, remove, view).
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
-- Times are zero-padded to 13 digits and positions to 16, so that the
-- members of a topic sort by them. A topic holds no comma (push refuses
-- one), so "topic," starts exactly the members of that topic.
--
-- Every script receives the same ARGV header; its own arguments start at
-- ARGV[ARG]:
--   1 wake-up token cap per list
--   2 dead letters kept per topic in this partition, 3 their time to live ms
--   4 n, then 5..4+n the topics whose wake-up lists are KEYS[11..10+n]
--
-- Lua creates every function and table of a script anew on each call, and
-- that is most of a small call's cost: the sections keep both few, and
-- name keys through KEYS rather than in upvalues.
local WAKE = {}
local ARG = 5 + tonumber(ARGV[4])
for i = 1, ARG - 5 do
  WAKE[ARGV[4 + i]] = KEYS[10 + i]
end

-- clock reads the one clock every instance shares, Redis TIME, once per
-- call: now in ms rounded down, and rounded up (for due times: a job is
-- never early).
local clock_ms, clock_ceil
local function clock()
  if not clock_ms then
    local t = redis.call('TIME')
    local s, us = tonumber(t[1]) * 1000, tonumber(t[2])
    clock_ms, clock_ceil = s + math.floor(us / 1000), s + math.ceil(us / 1000)
  end
  return clock_ms, clock_ceil
end

-- int renders a number as a decimal integer string (Redis' Lua and
-- miniredis' Lua print large numbers differently; this prints both alike).
-- Commands get their numbers as strings: Redis prints a number argument as
-- a float, which costs a small command as much as its own work.
local function int(n)
  return string.format('%d', n)
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
-- callback), plus 2 when its body is in BODIES (#body is -1 then); ttr in
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
local HEAD = '^(%a+),(%d+),(%d+),(%d+),(%d),(%d+),(%d+):()'

-- (tl and xl, the lengths of topic and extra as text, save printing them
-- when the caller has them.)
local function record(s, a, d, x, f, topic, extra, tail, tl, xl)
  return s .. ',' .. a .. ',' .. d .. ',' .. x .. ',' .. f .. ',' .. (tl or #topic) .. ',' .. (xl or #extra) .. ':' ..
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
  return {s = s, a = a, d = d, x = x, f = tonumber(f), topic = string.sub(raw, at, t_end - 1),
    rawextra = xl ~= '0' and string.sub(raw, t_end, x_end - 1) or '', rawtail = string.sub(raw, x_end)}
end

-- has_callback and separate_body read the flags.
local function has_callback(job)
  return job.f % 2 == 1
end

local function separate_body(job)
  return job.f >= 2
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
  local q, dt, ls, drl, lel, at = string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+):()')
  drl, lel = tonumber(drl), tonumber(lel)
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
      x = job.q .. ',' .. job.dt .. ',' .. job.ls .. ',' .. #job.dr .. ',' .. #job.le .. ':' .. job.dr .. job.le .. job.lb
    end
  end
  local t = job.rawtail
  if not t then
    local body, bl = job.body, '-1'
    if separate_body(job) then
      body = ''
    else
      bl = #body
    end
    t = job.r .. ',' .. job.c .. ',' .. job.m .. ',' .. #job.retry .. ',' .. #job.cb .. ',' .. bl .. ':' ..
      job.retry .. job.cb .. body
  end
  local a = job.a
  if type(a) == 'number' then
    a = int(a)
  end
  return job.s .. ',' .. a .. ',' .. job.d .. ',' .. job.x .. ',' .. job.f .. ',' .. #job.topic .. ',' ..
    (x == '' and '0' or #x) .. ':' .. job.topic .. x .. t
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
