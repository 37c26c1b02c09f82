-- Move expired leases to lost (worker died), due scheduled jobs to their queues, and jobs parked over
-- their key's limit back onto their queue when their key has room; a scheduled id whose hash is gone
-- or is not a hash moves to dying, so it cannot stop promotion for everyone.
-- KEYS: leases, lost, dying, the set of queue keys, then six keys per queue (its scheduled set,
-- list, wake list, high and low priority sets, and index of parked lines; a promoted or woken job goes
-- where its dj_priority says).
-- ARGV[1]: batch size, ARGV[2]: enqueued_at of promoted jobs, ARGV[3]: the job hash prefix,
-- ARGV[4]: JSON {'<canonical name>\n': the claim's limits entry} of the job types with limit_key,
-- ARGV[5]: seconds until a line that still holds jobs is looked at again, ARGV[6]: seconds a woken
-- job holds its slot.
-- Exceptions to "every key in KEYS": the hash of a due id, known only once read from the scheduled
-- set, and a due scope's line, slots and rate counter and the hashes of the jobs woken from it, known
-- once read from the index (see fair.lua); built from the prefixes in ARGV and KEYS, on this same server.
-- Returns {lost tokens moved, jobs promoted, parked jobs woken}.
${NOW}
${READY}
${FAIR}
local keyed = cjson.decode(ARGV[4])
local batch, recheck = tonumber(ARGV[1]), tonumber(ARGV[5])
local lost = 0
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, batch)) do
  redis.call('ZREM', KEYS[1], token)
  redis.call('ZADD', KEYS[2], now, token)
  lost = lost + 1
end

-- Wake the jobs of one due scope's line its key has room for, and say when to look again. A scope
-- whose type has no limit_key here (its limit was removed, or this runjobs runs other code) has no
-- limit: its jobs are all woken, a batch per pass.
local function look(index, scope, q)
  local limit = keyed[string.match(scope, '^(.*\n)') or '']
  local n, later, slots = batch, now + recheck, nil
  if limit then
    slots = limit[6] .. scope
    n = math.min(n, room(KEYS[1], KEYS[2], slots, {limit[1], limit[2], limit[3], limit[5] .. scope .. ':'}))
    if limit[2] > 0 then later = math.min(later, (math.floor(now / limit[3]) + 1) * limit[3]) end
  end
  local line = index .. '\n' .. scope
  local woken = unpark(index, line, scope, math.max(n, 0), slots, tonumber(ARGV[6]), q, ARGV[3])
  redis.call('ZADD', index, 'XX', later, scope)  -- unless its line emptied and left the index
  return woken
end

local promoted, woken = 0, 0
for n = 1, (#KEYS - 4) / 6 do
  local sched, list, wake, high, low, index = unpack(KEYS, 6 * n - 1, 6 * n + 4)
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'LIMIT', 0, batch)
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
  local lines = redis.pcall('ZRANGEBYSCORE', index, '-inf', now, 'LIMIT', 0, batch)
  for _, scope in ipairs(lines.err and {} or lines) do  -- an index of the wrong type: moved aside
    local ok, count = pcall(look, index, scope, {list, high, low, wake})
    if ok then woken = woken + count
    else redis.pcall('ZADD', index, now + recheck, scope) end  -- a broken key of its own: not again at once
  end
end
return {lost, promoted, woken}
