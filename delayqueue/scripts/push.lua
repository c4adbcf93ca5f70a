-- lib: ready
-- push.lua: create jobs, or replace the job with the same id in whatever
-- state it is (delay, ready, reserved or dead), atomically for the batch.
-- KEYS: the partition's (see lib.lua, section record), then the wake-up lists of the
-- batch's topics.
-- ARGV[ARG] job count n, then 9 values per job: id, topic, delay ms, ttr s,
-- body, retry schedule (comma-separated seconds or ''), max attempts,
-- if_absent (1 = leave an existing job alone), callback (JSON or ''; such
-- a job is delivered by the webhook dispatchers, never by pop).
-- Reply: {now in microseconds, then per job: due ms, status} with status 0 created,
-- 1 replaced, 2 left alone because it existed (if_absent).
local n = num(ARGV[ARG])
local now, due_base, now_us = clock()
local now_text = int(now)
local due_base_text -- int(due_base), printed once
local ids = {}
for j = 0, n - 1 do
  ids[j + 1] = ARGV[ARG + 1 + j * 9]
end
get_many(ids)
local reply = {now_us}
for j = 0, n - 1 do
  local base = ARG + 1 + j * 9
  local id, topic = ARGV[base], ARGV[base + 1]
  local delay_ms = num(ARGV[base + 2])
  local old = get_raw(id)
  if old == false then
    old = get(id) -- decoded by an earlier job of this call
  end
  local status, due = 0, due_base + delay_ms
  if old and ARGV[base + 7] == '1' then
    status = 2
    if type(old) == 'table' then
      due = tonumber(old.d)
    else
      local _, _, d = string.match(old, HEAD)
      due = tonumber(d)
    end
  else
    if type(old) == 'table' then
      status = 1
      remove(id, old)
    elseif old then
      status = 1
      remove_raw(id, old)
    end
    -- due_text is int(due), which is time13(due) from 2001 on.
    local s, x, due_text
    if delay_ms == 0 then
      s, x = 'ready', ready_position()
      due_base_text = due_base_text or int(due_base)
      due_text = due_base_text
      if ARGV[base + 8] ~= '' then
        signal(nil, 1)
      else
        signal(topic, 1)
      end
    else
      s, x = 'delay', time13(due)
      due_text = due >= 1e12 and x or int(due)
    end
    local retry, cb, body = ARGV[base + 5], ARGV[base + 8], ARGV[base + 4]
    local f, bl = 4, #body
    if cb ~= '' then
      f = 1
    end
    if bl > BODY_INLINE then
      f, bl = f + 2, -1
      note(pending('bodies'), id, body)
      body = ''
    end
    -- A replaced job's separate body was marked for deletion by remove.
    put(id, record(s, '0', due_text, x, int(f), topic, '', ARGV[base + 3] .. ',' .. now_text .. ',' .. ARGV[base + 6] ..
      ',' .. int(#retry) .. ',' .. int(#cb) .. ',' .. int(bl) .. ':' .. retry .. cb .. body))
    enter_as(id, s, x, topic, f, due)
  end
  reply[#reply + 1] = due
  reply[#reply + 1] = status
end
flush()
return reply
