  -- Its type is paused: its limits say so, and the paused hash still does (a resume may have come
  -- since the worker last looked). A job of a scope (limit_key) waits in its key's line, at its turn if
  -- it had one (and gives back the slot a woken one held), not woken again while the pause lasts
  -- (fair.lua), so its key's order stays in one place. Any other is parked at the tail of its type's
  -- parked list for its queue: it keeps its attempt count, status (queued) and order, and a resume puts
  -- it back at the head of its queue.
  local pause = job.pause
  if not pause or redis.call('HEXISTS', paused, pause.paused_field) == 0 then return nil end
  give_back(job)
  if job.scope then
    fair().park(job.queue, job.scope, job.id, job.key, job.turn, now + tonumber(recheck))
    return '${STOP_DEFERRED}'
  end
  redis.call('SADD', parked_lists, cjson.encode({job.queue.name, pause.canonical}))
  redis.call('RPUSH', limited(pause.parked + job.n - 1), job.id)
  redis.call('HSET', job.key, '${F_PARKED}', pause.canonical)
  return '${STOP_PARKED}'
