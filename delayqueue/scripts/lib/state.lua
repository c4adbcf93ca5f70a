-- state.lua: reading and changing jobs, gathered and written by flush.
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
local cache, dirty = {}, {}
local pend = {}

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

-- get_raw returns a job's record as a string, or nil when it has none,
-- or false when the call holds it decoded (then use get).
local function get_raw(id)
  local job = cache[id]
  if job == nil then
    job = redis.call('HGET', KEYS[1], id) or false
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
    job = redis.call('HGET', KEYS[1], id) or false
  end
  if type(job) == 'string' then
    job = decode(job) or false
  end
  cache[id] = job
  return job or nil
end

-- get_many loads the ids not cached yet with HMGET, 500 at a time.
local function get_many(ids)
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
      cache[missing[j]] = raws[j - i + 1] or false
    end
  end
end

-- put marks a job's record to be written: job is a table, a record string,
-- or false to delete it.
local function put(id, job)
  note(dirty, id, true)
  cache[id] = job
end

local function index_op(key, m, present)
  local index = pending('index')
  local ops = index[key]
  if not ops then
    ops = {}
    index[key] = ops
  end
  ops[m] = present
end

local function count(field, delta)
  local counts = pending('counts')
  note(counts, field, (counts[field] or 0) + delta)
end

-- enter puts a job in the index of its state, and leave takes it out, each
-- counting it there.
local function enter_as(id, s, x, topic, f)
  index_op(index_for(s, f), member_for(id, s, x, topic, f), true)
  count(s .. ',' .. topic, 1)
  if s == 'delay' or s == 'reserved' then
    -- Its timer is named as its counter is.
    local timers, timer, t = pending('timers'), s .. ',' .. topic, tonumber(x)
    if not timers[timer] or t < timers[timer] then
      note(timers, timer, t)
    end
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
  job.f = job.cb ~= '' and 1 or 0
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
  f = tonumber(f)
  leave_as(id, s, x, topic, f)
  put(id, false)
  if f >= 2 then
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
  local room = tonumber(ARGV[1]) - len
  if n > room then
    n = room
  end
  if n <= 0 then
    return
  end
  local tokens = {}
  for i = 1, math.min(n, 200) do
    tokens[i] = '1'
  end
  while n > 0 do
    local batch = math.min(n, 200)
    redis.call('RPUSH', key, unpack(tokens, 1, batch))
    n = n - batch
  end
  if len == 0 then
    redis.call('PEXPIRE', key, WAKE_TTL_MS)
  end
end

-- emit runs cmd on key with the fixed arguments pre (0 to 2), then args in
-- chunks of per.
local function emit(cmd, key, pre1, pre2, args, per)
  for i = 1, #args, per do
    local last = math.min(i + per - 1, #args)
    if pre2 then
      redis.call(cmd, key, pre1, pre2, unpack(args, i, last))
    elseif pre1 then
      redis.call(cmd, key, pre1, unpack(args, i, last))
    else
      redis.call(cmd, key, unpack(args, i, last))
    end
  end
end

-- The indexes flush writes, in this order.
local INDEXES = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}

-- flush writes the pending changes, in an order that loses no job if Redis
-- refuses one of them half-way (an ACL denying a command: Redis keeps a
-- failed script's earlier writes): index entries are added first, records
-- written next, old entries removed last; an entry left without a matching
-- record is dropped by whoever reads it next. Then it cleans up after the
-- topics the call emptied here: no counter, timer or wake-up list stays
-- (a wake-up list the call was not given expires, see WAKE_TTL_MS).
-- It returns the counters it changed, each field with its new value.
local function flush()
  local index = pend.index
  if index then
    for _, key in ipairs(INDEXES) do
      local ops = index[key]
      if ops then
        local adds = {}
        for m, present in pairs(ops) do
          if present then
            adds[#adds + 1] = '0'
            adds[#adds + 1] = m
          end
        end
        emit('ZADD', key, nil, nil, adds, 800)
      end
    end
  end
  local timers = pend.timers
  if timers then
    local args = {}
    for _, topic in ipairs(timers) do
      args[#args + 1] = int(timers[topic])
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
  local bodies, body_deletes = pend.bodies, {}
  if bodies then
    local body_writes = {}
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
  emit('HDEL', KEYS[9], nil, nil, body_deletes, 400)
  if index then
    for _, key in ipairs(INDEXES) do
      local ops = index[key]
      if ops then
        local rems = {}
        for m, present in pairs(ops) do
          if not present then
            rems[#rems + 1] = m
          end
        end
        emit('ZREM', key, nil, nil, rems, 400)
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
    for _, sign in ipairs({1, -1}) do
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
