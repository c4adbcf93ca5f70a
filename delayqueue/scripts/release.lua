-- release.lua: a consumer gives a reserved job back; that delivery ends as
-- failed now. The job is scheduled by its retry schedule (or the given
-- delay), or dead-lettered when its attempts are used up.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG] id, ARGV[ARG+1] delay ms overriding the schedule (-1: none),
-- ARGV[ARG+2] the delivery's attempt number (0: not checked), ARGV[ARG+3]
-- the reason recorded if it dies ('released', or 'callback-failed' from the
-- webhook dispatcher, which also gives ARGV[ARG+4..6]: the call's status,
-- error and the start of the response, kept for /get).
-- Reply: {status, state or '', due ms, topic}: status 1 released, 0 unknown id,
-- -1 not reserved (state given), -2 stale delivery (attempt differs).
local id = ARGV[ARG]
local job = job_key(id)
local f, refusal = held_delivery(job, ARGV[ARG + 2], 's', 'a', 'k', 't')
if refusal then
  return refusal
end
local now = now_ms()
local override = tonumber(ARGV[ARG + 1])
if override < 0 then
  override = nil
end
redis.call('ZREM', bucket_key(f[3]), id)
if ARGV[ARG + 3] == 'callback-failed' then
  redis.call('HSET', job, 'ls', ARGV[ARG + 4], 'le', ARGV[ARG + 5], 'lb', ARGV[ARG + 6])
end
local state = fail_delivery(id, job, ARGV[ARG + 3], now, override, now)
local due = now
if state == 'delay' then
  due = tonumber(redis.call('ZSCORE', bucket_key(f[3]), id))
end
return {1, state, due, f[4]}
