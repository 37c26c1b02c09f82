-- Hand a running job back untouched (shutdown): no attempt is spent.
-- KEYS: leases, its queue's wip set, its queue's list, its hash, its queue's wake list. ARGV: token.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$$')
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], id)
local attempt = tonumber(redis.call('HGET', KEYS[4], 'dj_attempt')) or 1
redis.call('HSET', KEYS[4], 'status', '${QUEUED}', 'dj_attempt', math.max(attempt - 1, 0))
redis.call('RPUSH', KEYS[5], 1)
return 1
