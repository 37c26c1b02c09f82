-- A dead letter's row exists: forget the item. holder: the set it is in (dying, or lost when a
-- lost attempt was quarantined), hash: its job hash, wip (or false): its queue's wip set; ttl: for
-- the job hash.
if redis.call('ZREM', holder, member) == 1 then
  if redis.call('EXISTS', hash) == 1 then
    redis.call('EXPIRE', hash, ttl)
  end
  if wip then redis.call('ZREM', wip, member) end
end
return 1
