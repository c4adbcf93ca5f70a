-- lib: held
-- touch.lua: extend a reserved job's lease to now + ttr, for long work.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG] id, ARGV[ARG+1] the delivery's attempt number (0: not checked).
-- Reply: {status, state or '', lease end ms}: status 1 touched, 0 unknown
-- id, -1 not reserved (state given), -2 stale delivery.
local id = ARGV[ARG]
local job, refusal = held_delivery(id, ARGV[ARG + 1])
if refusal then
  return refusal
end
local lease = clock() + tonumber(tail(job).r) * 1000
move(id, job, 'reserved', time13(lease))
flush()
return {1, 'reserved', lease}
