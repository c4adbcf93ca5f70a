-- ready.lua: making jobs ready.

-- Ready positions come from one counter per partition (counts' "seq"), so
-- that a topic's jobs pop in the order they became ready. A call takes a
-- few at a time: most make one or a few jobs ready.
local positions_left, next_position = 0, 0
local function ready_position()
  if positions_left == 0 then
    positions_left = 64
    next_position = redis.call('HINCRBY', KEYS[8], 'seq', '64') - positions_left
  end
  positions_left = positions_left - 1
  next_position = next_position + 1
  return string.format('%016d', next_position)
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

-- make_ready_raw is make_ready for a delayed job's record not decoded,
-- found by index entry m: it returns the job's due time, false when the
-- entry matches no delayed job, or nil when the record has an extra part
-- (then decode it and use make_ready).
local function make_ready_raw(id, raw, m)
  local s, a, d, x, f, tl, xl, at = string.match(raw, HEAD)
  local topic = string.sub(raw, at, at + tl - 1)
  if s ~= 'delay' or topic .. ',' .. x .. ',' .. id ~= m then
    return false
  end
  if xl ~= '0' then
    return nil
  end
  local flags = tonumber(f)
  local pos = ready_position()
  leave_as(id, 'delay', x, topic, flags)
  enter_as(id, 'ready', pos, topic, flags)
  put(id, record('ready', a, d, pos, f, topic, '', string.sub(raw, at + tl), tl, '0'))
  if flags % 2 == 1 then
    signal(nil, 1)
  else
    signal(topic, 1)
  end
  return tonumber(x)
end
