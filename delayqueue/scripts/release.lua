-- release.lua: a consumer gives a reserved job back; that delivery ends as
-- failed now. The job is scheduled by its retry schedule (or the given
-- delay), or dead-lettered when its attempts are used up.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] id, ARGV[ARG+1] delay ms overriding the schedule (-1: none),
-- ARGV[ARG+2] the delivery's attempt number (0: not checked).
-- Reply: {status, state or '', due ms}: status 1 released, 0 unknown id,
-- -1 not reserved (state given), -2 stale delivery (attempt differs).
local id = ARGV[ARG]
local job = job_key(id)
local f = redis.call('HMGET', job, 's', 'a', 'k')
if not f[1] then
  return {0, '', 0}
end
if f[1] ~= 'reserved' then
  return {-1, f[1], 0}
end
if ARGV[ARG + 2] ~= '0' and ARGV[ARG + 2] ~= f[2] then
  return {-2, f[1], 0}
end
local now = now_ms()
local override = tonumber(ARGV[ARG + 1])
if override < 0 then
  override = nil
end
redis.call('ZREM', bucket_key(f[3]), id)
local state = fail_delivery(id, job, 'released', now, override, now)
local due = now
if state == 'delay' then
  due = tonumber(redis.call('ZSCORE', bucket_key(f[3]), id))
end
return {1, state, due}
