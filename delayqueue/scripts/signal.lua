-- lib:
-- signal.lua: leave wake-up tokens for the held pops of topics whose jobs
-- a call made ready without their wake-up lists (movedue.lua, release.lua),
-- or that a dispatch loop gives back (its waiters left).
-- KEYS: the partition's (see lib.lua, section record), then the topics' wake-up lists.
-- ARGV[ARG..] per topic of the header, the tokens to add.
-- Reply: 1.
-- Tokens say a job is ready: a topic with none ready here any more (a
-- claim took them since) gets none, or they would wake held pops for
-- nothing and outlive its jobs until the list expires (see WAKE_TTL_MS).
for i = 1, tonumber(ARGV[4]) do
  if redis.call('HEXISTS', KEYS[8], 'ready,' .. ARGV[4 + i]) == 1 then
    signal_key(KEYS[10 + i], tonumber(ARGV[ARG + i - 1]))
  end
end
return 1
