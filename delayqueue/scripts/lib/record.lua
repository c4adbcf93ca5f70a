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
--   7 timers    ZSET topic -> ms: no job of the topic here is due, nor its
--               lease over, before that time (a lower bound the scanner
--               raises)
--   8 counts    HASH "<state>,<topic>" -> jobs in that state; "dropped,<topic>"
--               -> its dead letters dropped over the cap or the ttl, while
--               it holds jobs; "dropped" -> all dropped; "seq" -> the last
--               ready position handed out
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
local function decode(raw)
  if not raw then
    return nil
  end
  local s, a, d, x, r, c, m, tl, rl, cl, xl, bl, at = string.match(raw,
    '^(%a+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%d+),(%-?%d+):()')
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
    local q, dt, ls, drl, lel, xat = string.match(raw, '^(%d+),(%d+),(%d+),(%d+),(%d+):()', at)
    job.q, job.dt, job.ls = q, dt, ls
    drl, lel = tonumber(drl), tonumber(lel)
    job.dr = string.sub(raw, xat, xat + drl - 1)
    job.le = string.sub(raw, xat + drl, xat + drl + lel - 1)
    job.lb = string.sub(raw, xat + drl + lel, at + xl - 1)
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
  if job.separate then
    body = ''
  else
    bl = #body
  end
  return job.s .. ',' .. int(job.a) .. ',' .. job.d .. ',' .. job.x .. ',' .. job.r .. ',' .. job.c .. ',' ..
    job.m .. ',' .. #job.topic .. ',' .. #job.retry .. ',' .. #job.cb .. ',' .. #extra .. ',' .. bl .. ':' ..
    job.topic .. job.retry .. job.cb .. extra .. body
end

-- index_of is the index holding a job in its state, and member its entry
-- there.
local function index_of(job)
  local s = job.s
  if s == 'ready' then
    if job.cb ~= '' then
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

local function member(id, job)
  if job.s == 'ready' and job.cb ~= '' then
    return job.x .. ',' .. id
  end
  return job.topic .. ',' .. job.x .. ',' .. id
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
