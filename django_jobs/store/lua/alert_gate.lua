-- Count a dead letter in its alert group. KEYS: window marker, count, last counted dead letter, alert due.
-- ARGV: window, dead letter pk, fingerprint, keep.
-- Returns how many dead letters to report now: this one plus any counted but never reported; 0 = only counted.
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then
  local earlier = tonumber(redis.call('GET', KEYS[2]) or '0')
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('ZREM', KEYS[4], ARGV[3])
  return earlier + 1
end
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[4])
${NOW}
redis.call('ZADD', KEYS[4], 'NX', now + redis.call('PTTL', KEYS[1]) / 1000, ARGV[3])
return 0
