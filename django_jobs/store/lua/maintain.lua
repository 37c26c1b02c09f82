-- Move expired leases to lost (worker died), and due scheduled jobs to their queues; a scheduled id
-- whose hash is gone or is not a hash moves to dying, so it cannot stop promotion for everyone.
-- KEYS: leases, lost, dying, the set of queue keys, then five keys per queue (its scheduled set,
-- list, wake list, high and low priority sets; a promoted job goes where its dj_priority says).
-- ARGV[1]: batch size, ARGV[2]: enqueued_at of promoted jobs, ARGV[3]: the job hash prefix.
-- Exception to "every key in KEYS": the hash of a due id, known only once read from the scheduled
-- set; built from the prefix in ARGV, on this same server.
-- Returns {lost tokens moved, jobs promoted}.
${NOW}
${READY}
local lost = 0
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])) do
  redis.call('ZREM', KEYS[1], token)
  redis.call('ZADD', KEYS[2], now, token)
  lost = lost + 1
end
local promoted = 0
for n = 1, (#KEYS - 4) / 5 do
  local sched, list, wake, high, low = unpack(KEYS, 5 * n, 5 * n + 4)
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'LIMIT', 0, ARGV[1])
  if #due > 0 then
    local moved = 0
    for _, id in ipairs(due) do
      local key = ARGV[3] .. id
      if redis.call('TYPE', key)['ok'] == 'hash' then
        redis.call('HSET', key, 'status', '${QUEUED}', 'enqueued_at', ARGV[2])
        ready(list, high, low, id, priority_in(key), false)
        moved = moved + 1
      else
        -- its hash vanished, or the key is not a hash: dead-lettered from what is left, never queued
        redis.call('ZADD', KEYS[3], now, id)
      end
    end
    redis.call('ZREM', sched, unpack(due))
    if moved > 0 then
      redis.call('SADD', KEYS[4], list)
      for i = 1, math.min(moved, 64) do redis.call('RPUSH', wake, 1) end
      redis.call('LTRIM', wake, 0, 63)
    end
    promoted = promoted + moved
  end
end
return {lost, promoted}
