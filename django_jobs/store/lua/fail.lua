-- Fenced end of one failed or cancelled attempt. KEYS: where its token is (leases, or lost once
-- reaped), its queue's wip set, its hash, its queue's list, wake list and scheduled set, the dying set,
-- its queue's high and low priority sets; for a job with a limit key (limit_key), then the leases and
-- lost sets, its scope's slots and line and its queue's index of lines (see fair.lua).
-- ARGV: token, delay seconds (retry; 0 = the head of the queue now), -1 (dead) or -2 (cancelled),
-- ended_at, seconds a cancelled job's hash lives, its scope as next_turn reads it or '', then
-- field/value pairs to write on the job hash.
-- A dead job moves to dying until its row is written. A job whose cancel was requested ('dj_cancel')
-- is cancelled whatever was asked: it never runs again and is never dead-lettered.
-- A job that leaves its key's turn (retried later, dead, cancelled) frees its slot for the next job
-- parked in its line; one that goes back to the head of its queue keeps its slot (keep_turn).
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's ARGV, on this server.
-- Returns 0 (fenced: the token holds no lease), 1 (settled as asked) or 2 (cancelled).
${NOW}
${READY}
${FAIR}
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$$')
local key = KEYS[3]
local delay = tonumber(ARGV[2])
local scope = ARGV[5] ~= '' and cjson.decode(ARGV[5])

-- A broken key of its scope must not undo the settling: maintenance wakes its line instead.
local function freed()
  if scope then
    local q = {KEYS[4], KEYS[8], KEYS[9], KEYS[5]}
    pcall(next_turn, KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14], scope, q, ARGV[1])
  end
end

redis.call('ZREM', KEYS[2], ARGV[1])
if #ARGV > 5 then redis.call('HSET', key, unpack(ARGV, 6)) end
if delay == -2 or redis.call('HEXISTS', key, 'dj_cancel') == 1 then
  redis.call('HSET', key, 'status', '${CANCELED}', 'ended_at', ARGV[3])
  redis.call('EXPIRE', key, ARGV[4])
  freed()
  return 2
end
if delay == 0 then
  -- no backoff (its worker died): straight back to the head of its priority, not behind a backlog
  redis.call('HSET', key, 'status', '${QUEUED}')
  ready(KEYS[4], KEYS[8], KEYS[9], id, priority_in(key), true)
  redis.call('RPUSH', KEYS[5], 1)
  if scope then pcall(keep_turn, KEYS[12], scope, id, key, ARGV[1]) end
elseif delay > 0 then
  redis.call('HSET', key, 'status', '${SCHEDULED}')
  redis.call('ZADD', KEYS[6], now + delay, id)
  freed()
else
  redis.call('HSET', key, 'status', '${FAILED}')
  redis.call('ZADD', KEYS[7], now, id)
  freed()
end
return 1
