-- A job a foreign worker (an rqworker on a django_jobs queue) took and failed: out of RQ's failed
-- registry into dying, to be dead-lettered. Only a django_jobs job (its hash has ${F_ATTEMPT}) that
-- is still in the registry moves: RQ's own failures stay where RQ put them. Its payload, which RQ
-- rewrote compressed, is put back as given (data), with why it failed (exception, message).
-- registry: RQ's failed registry of its queue; hash: its job hash; dying: the dying set.
if redis.call('ZSCORE', registry, id) == false then return 0 end
if redis.call('HEXISTS', hash, '${F_ATTEMPT}') == 0 then return 0 end
redis.call('ZREM', registry, id)
redis.call('HSET', hash, '${F_DATA}', data, '${F_STATUS}', '${FAILED}', '${F_REASON}', reason,
           '${F_EXCEPTION}', exception, '${F_MESSAGE}', message)
local now = redis.call('TIME')
redis.call('ZADD', dying, now[1], id)
return 1
