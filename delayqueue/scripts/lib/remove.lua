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
    local job = get(id)
    local status, topic = 0, ''
    if job then
      topic = job.topic
      if keep_dead and job.s == 'dead' then
        status = -1
      else
        remove(id, job)
        status = 1
      end
    end
    reply[#reply + 1] = status
    reply[#reply + 1] = topic
  end
  flush()
  return reply
end
