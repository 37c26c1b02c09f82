-- Start a scheduled job now (a retry waiting out its backoff, a delayed or limit-deferred job): out
-- of its scheduled set and onto its queue where its priority says, as a promotion would at its due
-- time. A limit still applies: the claim checks it again. Names: the interface in scripts.py (queue:
-- its queue's keys; stamp: now, RQ's format).
-- Returns 1 moved, 0 not scheduled (queued, running or ended: nothing to do), -1 no such job.
${READY}
if redis.call('TYPE', hash)['ok'] ~= 'hash' then return -1 end
if redis.call('ZREM', queue.scheduled, id) == 0 then return 0 end
redis.call('HSET', hash, '${F_STATUS}', '${QUEUED}', '${F_ENQUEUED_AT}', stamp)
ready(queue, id, priority_in(hash), false)
redis.call('SADD', queues_set, queue.list)
redis.call('RPUSH', queue.wake, 1)
redis.call('LTRIM', queue.wake, 0, 63)
return 1
