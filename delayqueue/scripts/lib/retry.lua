-- retry.lua: a delivery that failed (its lease ran out, a release, a
-- webhook call that failed).

-- retry_interval_ms is the wait after delivery n failed: retry[min(n, len)]
-- of the schedule, 0 without one.
local function retry_interval_ms(schedule, n)
  if schedule == '' then
    return 0
  end
  local list = {}
  for v in string.gmatch(schedule, '[^,]+') do
    list[#list + 1] = tonumber(v)
  end
  return list[math.max(1, math.min(n, #list))] * 1000
end

-- attempts_limit is the job's limit on deliveries; 0 is unlimited. With a
-- schedule and no explicit limit, the job gets one more than its retries.
local function attempts_limit(job)
  tail(job)
  local m = tonumber(job.m)
  if m > 0 or job.retry == '' then
    return m
  end
  local _, commas = string.gsub(job.retry, ',', '')
  return commas + 2
end

-- fail_delivery ends a reserved job's delivery as failed at end_ms: to the
-- dead letters when its attempts are used up, else scheduled by its retry
-- schedule (or override_ms) and ready at once when that time has come.
-- Returns the new state. The caller commits (dead letters are trimmed).
local function fail_delivery(id, job, reason, end_ms, override_ms, now)
  local limit, attempts = attempts_limit(job), tonumber(job.a)
  extra(job).q = '0'
  if limit > 0 and attempts >= limit then
    bury(id, job, reason, now)
    return 'dead'
  end
  local due = math.max(end_ms + (override_ms or retry_interval_ms(job.retry, attempts)), now)
  job.d = int(due)
  if due <= now then
    make_ready(id, job)
    return 'ready'
  end
  move(id, job, 'delay', time13(due))
  return 'delay'
end
