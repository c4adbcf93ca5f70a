-- lib: ready dead retry held
-- release.lua: a consumer gives a reserved job back; that delivery ends as
-- failed now. The job is scheduled by its retry schedule (or the given
-- delay), or dead-lettered when its attempts are used up.
-- KEYS: the partition's (see lib.lua, section record); the caller does not know the
-- job's topic, so the reply names it to signal when the job became ready.
-- ARGV[ARG] id, ARGV[ARG+1] delay ms overriding the schedule (-1: none),
-- ARGV[ARG+2] the delivery's attempt number (0: not checked), ARGV[ARG+3]
-- the reason recorded if it dies ('released', or 'callback-failed' from the
-- webhook dispatcher, which also gives ARGV[ARG+4..6]: the call's status,
-- error and the start of the response, kept for /get; and ARGV[ARG+7] the
-- job's creation time in ms as the call knew it, see held_delivery).
-- Reply: {status, state or '', due ms, topic, then the topics to signal: n
-- and n pairs topic, tokens}: status 1 released, 0 unknown id, -1 not
-- reserved (state given), -2 stale delivery (attempt differs), -3 a
-- consumer's release ('released') of a webhook job, which only its
-- dispatcher ends: ready at once, another would call it during this call.
local id = ARGV[ARG]
local created
if ARGV[ARG + 3] == 'callback-failed' then
  created = ARGV[ARG + 7]
end
local job, refusal = held_delivery(id, ARGV[ARG + 2], created)
if refusal then
  return refusal
end
if ARGV[ARG + 3] == 'released' and has_callback(job) then
  return {-3, job.s, 0}
end
local now = clock()
local override = tonumber(ARGV[ARG + 1])
if override < 0 then
  override = nil
end
if ARGV[ARG + 3] == 'callback-failed' then
  extra(job)
  job.ls, job.le, job.lb = ARGV[ARG + 4], ARGV[ARG + 5], ARGV[ARG + 6]
end
local state = fail_delivery(id, job, ARGV[ARG + 3], now, override, now)
commit(now)
local due = now
if state == 'delay' then
  due = tonumber(job.d)
end
return unsignaled_reply({1, state, due, job.topic})
