-- Start a scheduled job now (a retry waiting out its backoff, a delayed or limit-deferred job): out
-- of its scheduled set and onto its queue where its priority says, as a promotion would at its due
-- time. A limit still applies: the claim checks it again.
-- KEYS[1] the job hash, KEYS[2] its scheduled set, KEYS[3..5] its list, high and low sets,
-- KEYS[6] its wake list, KEYS[7] the set of queue keys. ARGV[1] the job id, ARGV[2] now (RQ's format).
-- Returns 1 moved, 0 not scheduled (queued, running or ended: nothing to do), -1 no such job.
${READY}
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return -1 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', '${QUEUED}', 'enqueued_at', ARGV[2])
ready(KEYS[3], KEYS[4], KEYS[5], ARGV[1], priority_in(KEYS[1]), false)
redis.call('SADD', KEYS[7], KEYS[3])
redis.call('RPUSH', KEYS[6], 1)
redis.call('LTRIM', KEYS[6], 0, 63)
return 1
