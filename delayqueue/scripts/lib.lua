-- lib.lua: the state machine shared by every script; prepended to each of
-- them (see scripts.go). It only defines locals.
--
-- Every script receives the same ARGV header, ARGV[1..8]; its own arguments
-- start at ARGV[ARG]:
--   1 key prefix (job hashes, wake-up lists, counters, dead letters)
--   2/3 bucket key prefix/suffix (around the bucket number)
--   4/5 ready list key prefix/suffix (around the topic)
--   6 wake-up token cap per topic
--   7 dead letters kept per topic, 8 dead letters' time to live in ms
-- Keys a script only learns inside Lua (a due job's topic, its bucket) are
-- built from this header, never from literals.
--
-- Job hash fields: t topic, s state (delay|ready|reserved|dead), d due
-- ms (the next due time once rescheduled), r ttr s, a attempts, c created ms, k bucket number, l lease end ms,
-- rt retry schedule (comma-separated seconds), m max attempts (0 unlimited),
-- dr/dt dead reason and time, cb callback (JSON), ls/le/lb last callback
-- status, error and response start, n/b1..bn body chunks (see body_fields).
local P, BP, BS, RP, RS = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local WAKE_CAP, DEAD_MAX, DEAD_TTL = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local ARG = 9

local function job_key(id) return P .. 'job:' .. id end
local function bucket_key(k) return BP .. k .. BS end
local function ready_key(topic) return RP .. topic .. RS end
local function wake_key(topic) return P .. 'wake:' .. topic end
local function dead_key(topic) return P .. 'dead:' .. topic end
local function count_key(topic) return P .. 'count:' .. topic end
local TOPICS = P .. 'topics'
-- Jobs with a callback are never handed to /pop: when ready they wait in
-- one list of their own for the webhook dispatchers.
local HOOKS = P .. 'hooks'
local HOOK_WAKE = P .. 'wake_hooks'
local DEAD_DROPPED = P .. 'dead_dropped'

-- now_us reads the one clock every instance shares: Redis TIME.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function now_ms()
  return math.floor(now_us() / 1000)
end

-- int renders a number as a decimal integer string (Redis' Lua and
-- miniredis' Lua print large numbers differently; this prints both alike).
local function int(n)
  return string.format('%d', n)
end

-- count moves the per-topic state counters that /stats reads, and keeps the
-- set of topics that hold jobs (a topic with a positive counter is in it).
local function count(topic, state, delta)
  if delta == 0 then
    return
  end
  local key = count_key(topic)
  local v = redis.call('HINCRBY', key, state, delta)
  if delta > 0 then
    if v == delta then
      redis.call('SADD', TOPICS, topic)
    end
  elseif v <= 0 then
    local vals = redis.call('HVALS', key)
    local sum = 0
    for _, x in ipairs(vals) do
      sum = sum + tonumber(x)
    end
    if sum <= 0 then
      redis.call('DEL', key)
      redis.call('SREM', TOPICS, topic)
    end
  end
end

local function set_state(job, topic, from, to)
  redis.call('HSET', job, 's', to)
  if from then
    count(topic, from, -1)
  end
  count(topic, to, 1)
end

-- body_chunk is the largest chunk of a body stored in one hash field: values
-- up to hash-max-listpack-value (64 by default) keep the hash compact.
local body_chunk = 64
-- Beyond body_max_chunks the hash is not compact anyway: the body is stored
-- whole in field b.
local body_max_chunks = 100

-- body_fields writes the fields storing body into an HSET argument list
-- after its first k entries, and returns the new length: chunks b1..bn
-- with n = count, or the whole body in b with n = -1.
local chunk_names = {}
local function chunk_name(i)
  local name = chunk_names[i]
  if not name then
    name = 'b' .. i
    chunk_names[i] = name
  end
  return name
end

local function body_fields(args, k, body)
  local size = string.len(body)
  local n = math.ceil(size / body_chunk)
  if n > body_max_chunks then
    args[k + 1], args[k + 2], args[k + 3], args[k + 4] = 'n', '-1', 'b', body
    return k + 4
  end
  args[k + 1], args[k + 2] = 'n', n
  k = k + 2
  if n == 1 then
    args[k + 1], args[k + 2] = 'b1', body
    return k + 2
  end
  for i = 1, n do
    args[k + 1] = chunk_name(i)
    args[k + 2] = string.sub(body, (i - 1) * body_chunk + 1, i * body_chunk)
    k = k + 2
  end
  return k
end

local function read_body(job, n)
  n = tonumber(n) or 0
  if n < 0 then
    return redis.call('HGET', job, 'b') or ''
  end
  if n == 0 then
    return ''
  end
  local fields = {}
  for i = 1, n do
    fields[i] = 'b' .. i
  end
  local parts = redis.call('HMGET', job, unpack(fields))
  for i = 1, n do
    parts[i] = parts[i] or ''
  end
  return table.concat(parts)
end

-- read_small_body returns a body whose first two chunks were read already
-- (with the job's other fields, sparing a call for bodies of up to two
-- chunks), reading the rest when there is more.
local function read_small_body(job, n, b1, b2)
  n = tonumber(n) or 0
  if n == 0 then
    return ''
  elseif n == 1 then
    return b1 or ''
  elseif n == 2 then
    return (b1 or '') .. (b2 or '')
  end
  return read_body(job, n)
end

-- signal_key leaves up to n wake-up tokens in a wake-up list.
local function signal_key(wake, n)
  local room = WAKE_CAP - redis.call('LLEN', wake)
  if n > room then
    n = room
  end
  while n > 0 do
    local batch = math.min(n, 200)
    local tokens = {}
    for i = 1, batch do
      tokens[i] = '1'
    end
    redis.call('RPUSH', wake, unpack(tokens))
    n = n - batch
  end
end

-- signal wakes up to n of a topic's held pops.
local function signal(topic, n)
  signal_key(wake_key(topic), n)
end

-- make_ready appends a job to its topic's ready list (or, with a callback,
-- to the webhook list). Callers set the state.
local function make_ready(id, job, topic, at_head)
  local list, wake = ready_key(topic), wake_key(topic)
  if redis.call('HEXISTS', job, 'cb') == 1 then
    list, wake = HOOKS, HOOK_WAKE
  end
  if at_head then
    redis.call('LPUSH', list, id)
  else
    redis.call('RPUSH', list, id)
  end
  signal_key(wake, 1)
end

-- drop_dead removes dead letters for good (over the cap or past their ttl).
local function drop_dead(topic, ids)
  for _, id in ipairs(ids) do
    redis.call('ZREM', dead_key(topic), id)
    if redis.call('DEL', job_key(id)) == 1 then
      count(topic, 'dead', -1)
      redis.call('HINCRBY', DEAD_DROPPED, topic, 1)
    end
  end
end

-- trim_dead enforces the dead letters' cap and time to live for a topic.
local function trim_dead(topic, now)
  local dead = dead_key(topic)
  local expired = redis.call('ZRANGEBYSCORE', dead, '-inf', int(now - DEAD_TTL), 'LIMIT', 0, 100)
  drop_dead(topic, expired)
  local over = redis.call('ZCARD', dead) - DEAD_MAX
  if over > 0 then
    drop_dead(topic, redis.call('ZRANGE', dead, 0, over - 1))
  end
end

-- bury moves a job to its topic's dead letters.
local function bury(id, job, topic, from, reason, now)
  set_state(job, topic, from, 'dead')
  redis.call('HSET', job, 'dr', reason, 'dt', int(now))
  redis.call('HDEL', job, 'l')
  redis.call('ZADD', dead_key(topic), int(now), id)
  trim_dead(topic, now)
end

-- retry_interval_ms is the wait after delivery n failed: retry[min(n, len)]
-- of the schedule, 0 without one.
local function retry_interval_ms(schedule, n)
  if not schedule or schedule == '' then
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

-- max_attempts is the job's limit on deliveries; 0 is unlimited. With a
-- schedule and no explicit limit, the job gets one more than its retries.
local function max_attempts(m, schedule)
  m = tonumber(m) or 0
  if m > 0 then
    return m
  end
  if schedule and schedule ~= '' then
    local n = 1
    for _ in string.gmatch(schedule, ',') do
      n = n + 1
    end
    return n + 1
  end
  return 0
end

-- fail_delivery ends a reserved job's delivery as failed at end_ms: to the
-- dead letters when its attempts are used up, else scheduled by its retry
-- schedule (or override_ms) and ready at once when that time has come.
-- The caller has removed the job's bucket entry. Returns the new state.
local function fail_delivery(id, job, reason, end_ms, override_ms, now)
  local f = redis.call('HMGET', job, 't', 'a', 'rt', 'm', 'k')
  local topic, attempts = f[1], tonumber(f[2])
  local limit = max_attempts(f[4], f[3])
  redis.call('HDEL', job, 'l')
  if limit > 0 and attempts >= limit then
    bury(id, job, topic, 'reserved', reason, now)
    return 'dead'
  end
  local due = end_ms + (override_ms or retry_interval_ms(f[3], attempts))
  redis.call('HSET', job, 'd', int(math.max(due, now)))
  if due <= now then
    set_state(job, topic, 'reserved', 'ready')
    make_ready(id, job, topic, false)
    return 'ready'
  end
  set_state(job, topic, 'reserved', 'delay')
  redis.call('ZADD', bucket_key(f[5]), int(due), id)
  return 'delay'
end

-- remove_job deletes a job and every index entry of it. A ready-list entry
-- left behind is dropped by claim, which finds no job for it. counter, when
-- given, replaces count (see new_tally).
local function remove_job(id, job, topic, state, k, counter)
  if state == 'delay' or state == 'reserved' then
    redis.call('ZREM', bucket_key(k), id)
  elseif state == 'dead' then
    redis.call('ZREM', dead_key(topic), id)
  end
  redis.call('DEL', job)
  local c = counter or count
  c(topic, state, -1)
end

-- new_tally collects counter changes of a batch, to apply them with one
-- HINCRBY per topic and state at the end (see apply_tally).
local function new_tally()
  return {topics = {}, deltas = {}}
end

local function tally_add(tally, topic, state, delta)
  local t = tally.deltas[topic]
  if not t then
    t = {}
    tally.deltas[topic] = t
    tally.topics[#tally.topics + 1] = topic
  end
  t[state] = (t[state] or 0) + delta
end

-- tally_counter is a replacement for count that adds to tally instead.
local function tally_counter(tally)
  return function(topic, state, delta) tally_add(tally, topic, state, delta) end
end

-- apply_tally applies the increments first, then the decrements, so that a
-- topic's counters never look empty halfway.
local function apply_tally(tally)
  for _, sign in ipairs({1, -1}) do
    for _, topic in ipairs(tally.topics) do
      for _, state in ipairs({'delay', 'ready', 'reserved', 'dead'}) do
        local d = tally.deltas[topic][state]
        if d and d * sign > 0 then
          count(topic, state, d)
        end
      end
    end
  end
end

-- append_to adds v to the list lists[key], keeping the keys in first-seen
-- order in keys.
local function append_to(lists, keys, key, v)
  local l = lists[key]
  if not l then
    l = {}
    lists[key] = l
    keys[#keys + 1] = key
  end
  l[#l + 1] = v
end

-- remove_jobs removes the jobs whose ids are ARGV[first..] and every trace
-- of them (finish.lua, delete.lua), with their counters applied once. With
-- keep_dead, a dead-lettered job is left alone. Reply: per id, a status (1
-- removed, 0 unknown, -1 dead-lettered and kept) and the job's topic (''
-- when unknown). The jobs' keys go in one DEL, and their index entries in
-- one ZREM per sorted set; an id given twice is unknown the second time, as
-- if the removals ran one after the other.
local function remove_jobs(first, keep_dead)
  local reply = {}
  local tally = new_tally()
  local removed = {}
  local jobs = {}
  local members, sets = {}, {}
  for i = first, #ARGV do
    local id = ARGV[i]
    local status, topic = 0, ''
    if not removed[id] then
      local job = job_key(id)
      local f = redis.call('HMGET', job, 's', 't', 'k')
      topic = f[2] or ''
      if keep_dead and f[1] == 'dead' then
        status = -1
      elseif f[1] then
        local state = f[1]
        if state == 'delay' or state == 'reserved' then
          append_to(members, sets, bucket_key(f[3]), id)
        elseif state == 'dead' then
          append_to(members, sets, dead_key(topic), id)
        end
        removed[id] = true
        jobs[#jobs + 1] = job
        tally_add(tally, topic, state, -1)
        status = 1
      end
    end
    reply[#reply + 1] = status
    reply[#reply + 1] = topic
  end
  for _, set in ipairs(sets) do
    redis.call('ZREM', set, unpack(members[set]))
  end
  if #jobs > 0 then
    redis.call('DEL', unpack(jobs))
  end
  apply_tally(tally)
  return reply
end

-- held_delivery reads a job a consumer acts on by its delivery (release,
-- touch) with fields..., and checks it: it returns the fields, or a refusal
-- reply {status, state or '', 0}: 0 unknown id, -1 not reserved (the state
-- given), -2 stale delivery (attempt, when not '0', is not the job's
-- current one). The first two fields read must be 's' and 'a'.
local function held_delivery(job, attempt, ...)
  local f = redis.call('HMGET', job, ...)
  if not f[1] then
    return nil, {0, '', 0}
  end
  if f[1] ~= 'reserved' then
    return nil, {-1, f[1], 0}
  end
  if attempt ~= '0' and attempt ~= f[2] then
    return nil, {-2, f[1], 0}
  end
  return f, nil
end

-- dead_ids is the dead letters of a topic an operation is about: the one
-- id given, or (id '') the n oldest.
local function dead_ids(topic, id, n)
  if id ~= '' then
    return {id}
  end
  return redis.call('ZRANGE', dead_key(topic), 0, n - 1)
end
