-- wrk script for scripts/bench.sh (WRK=1): single /push requests of ready
-- jobs (delay 0), shaped as dq-bench's push phase sends them: a 14-byte id
-- ("w", the thread's digit, a 12-digit counter), the topic bench-rd, a
-- 100-byte body. wrk's own Requests/sec is the figure; done() prints how
-- many answers were not code 0, which makes the figure void.
--   wrk -t1 -c32 -d10s -s scripts/wrk/push.lua http://127.0.0.1:9277

local threads = {}
local headers = { ["Content-Type"] = "application/json" }
local body = string.rep("b", 100)
-- Globals, so that done() can read each thread's with thread:get.
sent, failed = 0, 0

function setup(thread)
	thread:set("tid", #threads) -- a global of the thread's own Lua state
	table.insert(threads, thread)
end

function request()
	sent = sent + 1
	local id = string.format("w%d%012d", tid % 10, sent)
	return wrk.format("POST", "/push", headers,
		'{"topic":"bench-rd","id":"' .. id .. '","delay":0,"ttr":60,"body":"' .. body .. '"}')
end

function response(status, _, answer)
	if not string.find(answer, '"code":0,', 1, true) then
		failed = failed + 1
	end
end

function done(summary)
	local bad = 0
	for _, t in ipairs(threads) do
		bad = bad + t:get("failed")
	end
	io.write(string.format("wrk-answers %d\nwrk-failed %d\nwrk-rate %.1f\n",
		summary.requests, bad, summary.requests / (summary.duration / 1e6)))
end
