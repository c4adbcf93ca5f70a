-- lib: ready
-- migratev1.lua: move one job of this server's layout before partitions (a
-- hash per job, buckets by number, ready lists per topic) into its
-- partition, atomically. It touches the old layout's keys as well as a
-- partition's: it runs on one Redis only, before the engine starts, while
-- no server of the old version runs.
-- KEYS: the partition's (see lib.lua, section record), then KEYS[11] the job's old hash,
-- KEYS[12] its old bucket, KEYS[13] its topic's old ready list, KEYS[14]
-- its topic's old dead letters, KEYS[15] the old webhook list.
-- ARGV[ARG] id, ARGV[ARG + 1] for a ready job the time of its ready
-- position, ms ("" for now): the caller walks the old ready lists in their
-- order and gives times that never go back, so that the jobs keep it, and
-- stay ahead of jobs that came due later.
-- Reply: 1 migrated, 0 already in the current layout (the old copy is
-- dropped), -1 no old job.
local old, old_bucket, old_ready, old_dead, old_hooks = KEYS[11], KEYS[12], KEYS[13], KEYS[14], KEYS[15]
local id = ARGV[ARG]
local ready_at = tonumber(ARGV[ARG + 1])
local f = redis.call('HGETALL', old)
if #f == 0 then
  return -1
end
local h = {}
for i = 1, #f, 2 do
  h[f[i]] = f[i + 1]
end
local function drop_old()
  redis.call('ZREM', old_bucket, id)
  redis.call('ZREM', old_dead, id)
  redis.call('LREM', old_ready, 0, id)
  redis.call('LREM', old_hooks, 0, id)
  redis.call('DEL', old)
end
if get(id) then
  drop_old()
  return 0
end
-- The old body: chunks b1..bn, or whole in b (n = -1).
local body = ''
local n = tonumber(h.n or '0')
if n < 0 then
  body = h.b or ''
else
  local parts = {}
  for i = 1, n do
    parts[i] = h['b' .. i] or ''
  end
  body = table.concat(parts)
end
local now = clock()
local job = {a = tonumber(h.a or '0'), d = h.d or int(now), r = h.r or '1', c = h.c or int(now), m = h.m or '0',
  q = '0', dt = h.dt or '0', ls = h.ls or '0', dr = h.dr or '', le = h.le or '', lb = h.lb or '',
  topic = h.t or '', retry = h.rt or '', cb = h.cb or ''}
local state = h.s
local score = redis.call('ZSCORE', old_bucket, id)
if state == 'delay' then
  job.s, job.x = 'delay', time13(tonumber(score or job.d))
elseif state == 'reserved' then
  job.s, job.x = 'reserved', time13(tonumber(score or h.l or int(now)))
elseif state == 'dead' then
  job.s, job.x = 'dead', time13(tonumber(job.dt ~= '0' and job.dt or int(now)))
else
  job.s, job.x = 'ready', ready_position(ready_at)
end
drop_old()
create(id, job, body)
flush()
return 1
