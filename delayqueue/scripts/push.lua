-- lib: ready
-- push.lua: create jobs, or replace the job with the same id in whatever
-- state it is (delay, ready, reserved or dead), atomically for the batch.
-- KEYS: the partition's (see lib/record.lua), then the wake-up lists of the
-- batch's topics.
-- ARGV[ARG] job count n, then 9 values per job: id, topic, delay ms, ttr s,
-- body, retry schedule (comma-separated seconds or ''), max attempts,
-- if_absent (1 = leave an existing job alone), callback (JSON or ''; such
-- a job is delivered by the webhook dispatchers, never by pop).
-- Reply: {now ms, then per job: due ms, status} with status 0 created,
-- 1 replaced, 2 left alone because it existed (if_absent).
local n = tonumber(ARGV[ARG])
local now, due_base = clock()
local now_text = int(now)
local ids = {}
for j = 0, n - 1 do
  ids[j + 1] = ARGV[ARG + 1 + j * 9]
end
get_many(ids)
local reply = {now}
for j = 0, n - 1 do
  local base = ARG + 1 + j * 9
  local id, topic = ARGV[base], ARGV[base + 1]
  local delay_ms = tonumber(ARGV[base + 2])
  local old = get(id)
  local status, due = 0, due_base + delay_ms
  if old and ARGV[base + 7] == '1' then
    status = 2
    due = tonumber(old.d)
  else
    if old then
      status = 1
      remove(id, old)
    end
    local job = {a = 0, d = int(due), r = ARGV[base + 3], c = now_text, m = ARGV[base + 6], q = '0',
      dt = '0', ls = '0', dr = '', le = '', lb = '', topic = topic, retry = ARGV[base + 5], cb = ARGV[base + 8]}
    if delay_ms == 0 then
      job.s, job.x = 'ready', ready_position()
      if job.cb ~= '' then
        signal(nil, 1)
      else
        signal(topic, 1)
      end
    else
      job.s, job.x = 'delay', time13(due)
    end
    create(id, job, ARGV[base + 4])
  end
  reply[#reply + 1] = due
  reply[#reply + 1] = status
end
flush()
return reply
