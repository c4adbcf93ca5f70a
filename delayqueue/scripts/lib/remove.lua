-- remove.lua: jobs removed by id.

-- remove_jobs removes the jobs whose ids are ARGV[first..] (finish.lua,
-- delete.lua). With keep_dead, a dead-lettered job is left alone. Reply:
-- per id, a status (1 removed, 0 unknown, -1 dead-lettered and kept) and
-- the job's topic ('' when unknown). An id given twice is unknown the
-- second time, as if the removals ran one after the other.
local function remove_jobs(first, keep_dead)
  local ids = {unpack(ARGV, first)}
  get_many(ids)
  local reply = {}
  for _, id in ipairs(ids) do
    local status, topic = 0, ''
    local raw = get_raw(id)
    if raw then
      if keep_dead and string.sub(raw, 1, 5) == 'dead,' then
        status = -1
        local _, _, _, _, _, tl, _, at = string.match(raw, HEAD)
        topic = string.sub(raw, at, at + tl - 1)
      else
        _, topic = remove_raw(id, raw)
        status = 1
      end
    elseif raw == false then
      local job = get(id)
      if job then
        topic = job.topic
        if keep_dead and job.s == 'dead' then
          status = -1
        else
          remove(id, job)
          status = 1
        end
      end
    end
    reply[#reply + 1] = status
    reply[#reply + 1] = topic
  end
  flush()
  return reply
end
