-- Fenced end of one failed or cancelled attempt (names: the interface in scripts.py). held: where its
-- token is (leases, or lost once reaped); queue: its queue's keys; scope: its key's, for a job with a
-- limit key (limit_key, see fair.lua). mode: how it ends (${END_RETRY} after delay seconds,
-- ${END_REQUEUE} at the head of its queue now, ${END_DEAD}, ${END_CANCEL}); then field/value pairs to
-- write on the job hash (fields_from on).
-- A dead job moves to dying until its row is written. A job whose cancel was requested (${F_CANCEL})
-- is cancelled whatever was asked: it never runs again and is never dead-lettered.
-- A job that leaves its key's turn (retried later, dead, cancelled) frees its slot for the next job
-- parked in its line; one that goes back to the head of its queue keeps its slot (keep_turn).
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's limits, on this server.
-- Returns 0 (fenced: the token holds no lease), 1 (settled as asked) or 2 (cancelled).
${NOW}
${FAIR_MADE}
if redis.call('ZREM', held, token) == 0 then return 0 end
local id = string.match(token, '^(.*):[^:]*$$')
local limits = scope and cjson.decode(scope.limits)
redis.call('ZREM', queue.wip, token)
if #ARGV >= fields_from then redis.call('HSET', hash, unpack(ARGV, fields_from)) end
local settled = 1
if mode == '${END_CANCEL}' or redis.call('HEXISTS', hash, '${F_CANCEL}') == 1 then
  redis.call('HSET', hash, '${F_STATUS}', '${CANCELED}', '${F_ENDED_AT}', stamp)
  redis.call('EXPIRE', hash, finished_ttl)
  settled = 2
elseif mode == '${END_REQUEUE}' then
  -- no backoff (its worker died): straight back to the head of its priority, not behind a backlog
  redis.call('HSET', hash, '${F_STATUS}', '${QUEUED}')
  fair().ready(queue, id, fair().priority_in(hash), true)
  redis.call('RPUSH', queue.wake, 1)
  if scope then pcall(fair().keep_turn, scope, limits, id, hash, token) end
  return 1
elseif mode == '${END_RETRY}' then
  redis.call('HSET', hash, '${F_STATUS}', '${SCHEDULED}')
  redis.call('ZADD', queue.scheduled, now + tonumber(delay), id)
else
  redis.call('HSET', hash, '${F_STATUS}', '${FAILED}')
  redis.call('ZADD', dying, now, id)
end
-- A broken key of its scope must not undo the settling: maintenance wakes its line instead.
if scope then pcall(fair().next_turn, leases, lost, scope, limits, queue, token) end
return settled
