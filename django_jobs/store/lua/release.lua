-- Hand a running job back untouched (shutdown): no attempt is spent. A job whose cancel was requested
-- ('dj_cancel') is cancelled instead, so it never runs again.
-- KEYS: leases, its queue's wip set, its queue's list, its hash, its queue's wake list, high and low
-- priority sets; for a job with a limit key (limit_key), then the lost set, its scope's slots and line
-- and its queue's index of lines (see fair.lua). It goes back to the head of its priority, keeping
-- its key's slot and turn; cancelled, it gives the slot to the next job parked in its line.
-- ARGV: token, ended_at, seconds a cancelled job's hash lives, its scope as next_turn reads it or ''.
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's ARGV, on this server.
-- Returns 0 (its lease was gone), 1 (handed back) or 2 (cancelled).
${NOW}
${READY}
${FAIR}
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$$')
local scope = ARGV[4] ~= '' and cjson.decode(ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('HEXISTS', KEYS[4], 'dj_cancel') == 1 then
  redis.call('HSET', KEYS[4], 'status', '${CANCELED}', 'ended_at', ARGV[2])
  redis.call('EXPIRE', KEYS[4], ARGV[3])
  if scope then
    local q = {KEYS[3], KEYS[6], KEYS[7], KEYS[5]}
    pcall(next_turn, KEYS[1], KEYS[8], KEYS[9], KEYS[10], KEYS[11], scope, q, ARGV[1])
  end
  return 2
end
ready(KEYS[3], KEYS[6], KEYS[7], id, priority_in(KEYS[4]), true)
local attempt = tonumber(redis.call('HGET', KEYS[4], 'dj_attempt')) or 1
redis.call('HSET', KEYS[4], 'status', '${QUEUED}', 'dj_attempt', math.max(attempt - 1, 0))
redis.call('RPUSH', KEYS[5], 1)
if scope then pcall(keep_turn, KEYS[9], scope, id, KEYS[4], ARGV[1]) end
return 1
