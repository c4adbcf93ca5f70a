-- lib: dead
-- deadsweep.lua: enforce the dead letters' cap and time to live for topics
-- of the partition.
-- KEYS: the partition's (see lib.lua, section record).
-- ARGV[ARG..] topics.
-- Reply: the dead letters dropped.
local now = clock()
local dropped = 0
for i = ARG, #ARGV do
  dropped = dropped + trim_dead(ARGV[i], now)
end
return dropped
