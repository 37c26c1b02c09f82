-- Hand a running job back untouched (shutdown): no attempt is spent. A job whose cancel was requested
-- ('dj_cancel') is cancelled instead, so it never runs again.
-- KEYS: leases, its queue's wip set, its queue's list, its hash, its queue's wake list, high and low
-- priority sets. It goes back to the head of its priority.
-- ARGV: token, ended_at, seconds a cancelled job's hash lives.
-- Returns 0 (its lease was gone), 1 (handed back) or 2 (cancelled).
${READY}
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$$')
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[4], 'dj_cancel') == 1 then
  redis.call('HSET', KEYS[4], 'status', '${CANCELED}', 'ended_at', ARGV[2])
  redis.call('EXPIRE', KEYS[4], ARGV[3])
  return 2
end
ready(KEYS[3], KEYS[6], KEYS[7], id, priority_in(KEYS[4]), true)
local attempt = tonumber(redis.call('HGET', KEYS[4], 'dj_attempt')) or 1
redis.call('HSET', KEYS[4], 'status', '${QUEUED}', 'dj_attempt', math.max(attempt - 1, 0))
redis.call('RPUSH', KEYS[5], 1)
return 1
