-- Hand a running job back untouched (shutdown): no attempt is spent. A job whose cancel was requested
-- (${F_CANCEL}) is cancelled instead, so it never runs again. Names: the interface in scripts.py;
-- queue: its queue's keys; scope: its key's, for a job with a limit key (limit_key, see fair.lua).
-- It goes back to the head of its priority, keeping its key's slot and turn; cancelled, it gives the
-- slot to the next job parked in its line.
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's limits, on this server.
-- Returns 0 (its lease was gone), 1 (handed back) or 2 (cancelled).
${NOW}
${READY}
${FAIR}
if redis.call('ZREM', leases, token) == 0 then return 0 end
local id = string.match(token, '^(.*):[^:]*$$')
local limits = scope and cjson.decode(scope.limits)
redis.call('ZREM', queue.wip, token)
if redis.call('HEXISTS', hash, '${F_CANCEL}') == 1 then
  redis.call('HSET', hash, '${F_STATUS}', '${CANCELED}', '${F_ENDED_AT}', stamp)
  redis.call('EXPIRE', hash, finished_ttl)
  if scope then pcall(next_turn, leases, lost, scope, limits, queue, token) end
  return 2
end
ready(queue, id, priority_in(hash), true)
local attempt = tonumber(redis.call('HGET', hash, '${F_ATTEMPT}')) or 1
redis.call('HSET', hash, '${F_STATUS}', '${QUEUED}', '${F_ATTEMPT}', math.max(attempt - 1, 0))
redis.call('RPUSH', queue.wake, 1)
if scope then pcall(keep_turn, scope, limits, id, hash, token) end
return 1
