-- A dead letter's row exists: forget the item. KEYS[1]: the set it is in (dying, or lost when a
-- lost attempt was quarantined), KEYS[2]: its job hash, KEYS[3] (optional): its queue's wip set.
-- ARGV: member, ttl for the job hash.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('EXPIRE', KEYS[2], ARGV[2])
  end
  if KEYS[3] then redis.call('ZREM', KEYS[3], ARGV[1]) end
end
return 1
