-- Fenced snooze of one attempt: the job waits 'seconds' in its scheduled set, keeping its priority
-- (the promotion reads ${F_PRIORITY}), and the attempt the claim counted is given back; ${F_SNOOZES}
-- counts the snoozes. A job whose cancel was requested (${F_CANCEL}) is cancelled instead.
-- Names: the interface in scripts.py; queue: its queue's keys; scope: its key's, for a job with a
-- limit key (limit_key, see fair.lua): either way it frees its slot for the next job parked in its
-- line, as a retry does.
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's limits, on this server.
-- Returns 0 (fenced: the token holds no lease, nothing changes), 1 (snoozed) or 2 (cancelled).
${NOW}
${FAIR_MADE}
if redis.call('ZREM', leases, token) == 0 then return 0 end
redis.call('ZREM', queue.wip, token)
if scope then  -- a broken key of its scope must not undo the snooze: maintenance wakes its line instead
  pcall(fair().next_turn, leases, lost, scope, cjson.decode(scope.limits), queue, token)
end
if redis.call('HEXISTS', hash, '${F_CANCEL}') == 1 then
  redis.call('HSET', hash, '${F_STATUS}', '${CANCELED}', '${F_ENDED_AT}', stamp)
  redis.call('EXPIRE', hash, finished_ttl)
  return 2
end
local counted = redis.call('HMGET', hash, '${F_ATTEMPT}', '${F_SNOOZES}')
local attempt, snoozes = tonumber(counted[1]) or 1, tonumber(counted[2]) or 0
redis.call('HSET', hash, '${F_STATUS}', '${SCHEDULED}', '${F_ATTEMPT}', math.max(math.floor(attempt) - 1, 0),
           '${F_SNOOZES}', math.floor(snoozes) + 1)
redis.call('ZADD', queue.scheduled, now + tonumber(seconds), string.match(token, '^(.*):[^:]*$$'))
return 1
