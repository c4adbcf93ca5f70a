-- wrk script for scripts/bench.sh (WRK=1): consumers of the topic bench-rd,
-- as dq-bench's pop-finish phase runs them: a /pop (held up to 1 s), then a
-- /finish of the job it got. wrk cannot tie an answer to its request, so
-- each thread keeps the ids popped and not yet finished, and its next
-- request finishes one of them before it pops again. The figure is jobs
-- popped per second (each one then finished), which done() prints with the
-- answers that were not code 0 and the pops that found the topic empty
-- (either makes the figure void: the topic must stay full throughout).
--   wrk -t1 -c32 -d5s -s scripts/wrk/pop-finish.lua http://127.0.0.1:9277

local threads = {}
local headers = { ["Content-Type"] = "application/json" }
local pending = {}
-- Globals, so that done() can read each thread's with thread:get.
popped, finished, empty, failed = 0, 0, 0, 0
local pop

function setup(thread)
	table.insert(threads, thread)
end

function init()
	pop = wrk.format("POST", "/pop", headers, '{"topic":"bench-rd","timeout":1}')
end

function request()
	local id = table.remove(pending)
	if id then
		return wrk.format("POST", "/finish", headers, '{"id":"' .. id .. '"}')
	end
	return pop
end

function response(status, _, answer)
	if not string.find(answer, '"code":0,', 1, true) then
		failed = failed + 1
		return
	end
	local id = string.match(answer, '"data":{"id":"([^"]*)"')
	if id then
		popped = popped + 1
		table.insert(pending, id)
	elseif string.find(answer, '"message":"finished"', 1, true) then
		finished = finished + 1
	else
		empty = empty + 1
	end
end

function done(summary)
	local total = { popped = 0, finished = 0, empty = 0, failed = 0 }
	for _, t in ipairs(threads) do
		for k in pairs(total) do
			total[k] = total[k] + t:get(k)
		end
	end
	io.write(string.format("wrk-popped %d\nwrk-finished %d\nwrk-empty %d\nwrk-failed %d\nwrk-rate %.1f\n",
		total.popped, total.finished, total.empty, total.failed, total.popped / (summary.duration / 1e6)))
end
