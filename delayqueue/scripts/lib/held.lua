-- held.lua: a job acted on by its delivery (release, touch, and finish
-- with a receipt).

-- held_delivery reads it and checks it: it returns the job, or a refusal
-- reply {status, state or '', 0}: 0 unknown id, -1 not reserved (the
-- state given), -2 stale delivery (attempt, when not '0', is not the job's
-- current one).
local function held_delivery(id, attempt)
  local job = get(id)
  if not job then
    return nil, {0, '', 0}
  end
  if job.s ~= 'reserved' then
    return nil, {-1, job.s, 0}
  end
  if attempt ~= '0' and attempt ~= int(job.a) then
    return nil, {-2, job.s, 0}
  end
  return job, nil
end
