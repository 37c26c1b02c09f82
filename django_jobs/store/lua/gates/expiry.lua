  -- It never started (no ${F_FIRST_STARTED}: the attempt count is no witness, since a hand-back and a
  -- snooze give their attempt back) and its ${F_EXPIRES} (Unix time) has passed: it ends canceled with
  -- ${F_EXPIRED}, before its pause and limits are looked at (it is not parked, takes no slot and starts
  -- no rate window), and is reported to the caller.
  if not (job.expires and not job.started and now >= job.expires) then return nil end
  give_back(job)
  redis.call('HSET', job.key, '${F_STATUS}', '${CANCELED}', '${F_ENDED_AT}', stamp, '${F_EXPIRED}', stamp)
  redis.call('EXPIRE', job.key, finished_ttl)  -- kept like a finished job's: a duplicate push stays a no-op
  return '${STOP_DROPPED}'
