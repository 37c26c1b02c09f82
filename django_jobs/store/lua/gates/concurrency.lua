  -- A job of a type with a concurrency limit (and no limit_key: its scope's is the line's) waits a
  -- backoff in the scheduled set while its type's slots are all held by live leases.
  if job.scope or not job.slots then return nil end
  if fair().live(leases, false, job.slots) < job.limit.concurrency then return nil end
  return wait_out(job, tonumber(backoff))
