-- deadsweep.lua: enforce the dead letters' cap and time to live for topics.
-- KEYS: none (built from the ARGV header, see lib.lua).
-- ARGV[ARG..] topics.
-- Reply: 1.
local now = now_ms()
for i = ARG, #ARGV do
  trim_dead(ARGV[i], now)
end
return 1
