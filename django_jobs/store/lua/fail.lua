-- Fenced failure of one attempt. KEYS: where its token is (leases, or lost once reaped), its queue's
-- wip set, its hash, its queue's list, wake list and scheduled set, the dying set.
-- ARGV: token, delay seconds (retry; 0 = the head of the queue now) or -1 (dead), then field/value
-- pairs to write on the job hash. A dead job moves to dying until its row is written.
${NOW}
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$$')
local key = KEYS[3]
redis.call('ZREM', KEYS[2], ARGV[1])
if #ARGV > 2 then redis.call('HSET', key, unpack(ARGV, 3)) end
if tonumber(ARGV[2]) == 0 then
  -- no backoff (its worker died): straight back to the head of the queue, not behind a backlog
  redis.call('HSET', key, 'status', '${QUEUED}')
  redis.call('LPUSH', KEYS[4], id)
  redis.call('RPUSH', KEYS[5], 1)
elseif tonumber(ARGV[2]) > 0 then
  redis.call('HSET', key, 'status', '${SCHEDULED}')
  redis.call('ZADD', KEYS[6], now + tonumber(ARGV[2]), id)
else
  redis.call('HSET', key, 'status', '${FAILED}')
  redis.call('ZADD', KEYS[7], now, id)
end
return 1
