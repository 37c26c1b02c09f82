-- Fenced snooze of one attempt: the job waits ARGV[2] seconds in its scheduled set, keeping its
-- priority (the promotion reads dj_priority), and the attempt the claim counted is given back;
-- dj_snoozes counts the snoozes. A job whose cancel was requested ('dj_cancel') is cancelled instead.
-- KEYS: leases, its queue's wip set, its hash, its queue's scheduled set; for a job with a limit key
-- (limit_key), then the lost set, its scope's slots and line, its queue's index of lines, list, high
-- and low priority sets and wake list (see fair.lua): either way it frees its slot for the next job
-- parked in its line, as a retry does.
-- ARGV: token, seconds, ended_at, seconds a cancelled job's hash lives, its scope as next_turn reads
-- it or ''.
-- Exceptions to "every key in KEYS": a scope's rate counter and the hash of a job woken from its line,
-- built from the prefixes in its scope's ARGV, on this server.
-- Returns 0 (fenced: the token holds no lease, nothing changes), 1 (snoozed) or 2 (cancelled).
${NOW}
${READY}
${FAIR}
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
local key = KEYS[3]
local scope = (ARGV[5] or '') ~= '' and cjson.decode(ARGV[5])
if scope then  -- a broken key of its scope must not undo the snooze: maintenance wakes its line instead
  local q = {KEYS[9], KEYS[10], KEYS[11], KEYS[12]}
  pcall(next_turn, KEYS[1], KEYS[5], KEYS[6], KEYS[7], KEYS[8], scope, q, ARGV[1])
end
if redis.call('HEXISTS', key, 'dj_cancel') == 1 then
  redis.call('HSET', key, 'status', '${CANCELED}', 'ended_at', ARGV[3])
  redis.call('EXPIRE', key, ARGV[4])
  return 2
end
local counted = redis.call('HMGET', key, 'dj_attempt', 'dj_snoozes')
local attempt, snoozes = tonumber(counted[1]) or 1, tonumber(counted[2]) or 0
redis.call('HSET', key, 'status', '${SCHEDULED}', 'dj_attempt', math.max(math.floor(attempt) - 1, 0),
           'dj_snoozes', math.floor(snoozes) + 1)
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), string.match(ARGV[1], '^(.*):[^:]*$$'))
return 1
