  -- A job of a scope (limit_key) waits in its key's line while a job of its key that has not started
  -- comes before it (first come, first served, per key: fair.lua's before) or its key is at its
  -- concurrency limit. A woken one (it has its turn) first gives up the slot it held, to take it back
  -- with its lease; an attempt whose lease expired holds its slot until it is settled.
  if not job.scope then return nil end
  if job.turn then redis.call('ZREM', job.slots, job.id) end
  if fair().before(job.queue.lines .. '\n' .. job.scope, job.slots, job.id, job.turn, prefix) then
    return wait_out(job, tonumber(recheck))
  end
  local most = job.limit.concurrency
  if most > 0 and fair().live(leases, lost, job.slots) >= most then return wait_out(job, tonumber(recheck)) end
  return nil
