-- view.lua: jobs as the server reads them.

-- view is a job as a flat list of its fields (get.lua): the order is the
-- contract with the view constants of job.go.
local function view(id, job)
  tail(job)
  extra(job)
  return {id, job.topic, job.s, int(job.a), job.d, job.x, job.r, job.c, job.m, job.retry, job.cb,
    job.dr, job.dt, job.ls, job.le, job.lb, body_of(id, job)}
end
