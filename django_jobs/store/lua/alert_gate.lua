-- Count a dead letter in its alert group: window (its marker), count, last (counted dead letter),
-- due (when windows close); seconds: the window; pk: the dead letter's; keep: how long counts live.
-- Returns how many dead letters to report now: this one plus any counted but never reported; 0 = only counted.
if redis.call('SET', window, '1', 'NX', 'EX', seconds) then
  local earlier = tonumber(redis.call('GET', count) or '0')
  redis.call('DEL', count, last)
  redis.call('ZREM', due, fingerprint)
  return earlier + 1
end
redis.call('INCR', count)
redis.call('EXPIRE', count, keep)
redis.call('SET', last, pk, 'EX', keep)
${NOW}
redis.call('ZADD', due, 'NX', now + redis.call('PTTL', window) / 1000, fingerprint)
return 0
