-- dead.lua: dead letters.

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
local buried = {}
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
