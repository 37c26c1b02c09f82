  -- Its type is paused: its limits say so, and the paused hash still does (a resume may have come
  -- since the worker last looked). Parked at the tail of its type's parked list for its queue: it keeps
  -- its attempt count, status (queued) and order (and a job of a scope its turn, though not the slot
  -- it held), and a resume puts it back at the head of its queue.
  local pause = job.pause
  if not pause or redis.call('HEXISTS', paused, pause.paused_field) == 0 then return nil end
  give_back(job)
  redis.call('SADD', parked_lists, cjson.encode({job.queue.name, pause.canonical}))
  redis.call('RPUSH', limited(pause.parked + job.n - 1), job.id)
  redis.call('HSET', job.key, '${F_PARKED}', pause.canonical)
  return '${STOP_PARKED}'
