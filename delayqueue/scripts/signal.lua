-- lib:
-- signal.lua: leave wake-up tokens for the held pops of topics whose jobs
-- a call made ready without their wake-up lists (movedue.lua, release.lua).
-- KEYS: the partition's (see lib.lua, section record), then the topics' wake-up lists.
-- ARGV[ARG..] per topic of the header, the tokens to add.
-- Reply: 1.
for i = 1, tonumber(ARGV[4]) do
  signal_key(KEYS[10 + i], tonumber(ARGV[ARG + i - 1]))
end
return 1
