-- Move expired leases to lost (worker died), due scheduled jobs to their queues, and jobs parked over
-- their key's limit back onto their queue when their key has room; a scheduled id whose hash is gone
-- or is not a hash moves to dying, so it cannot stop promotion for everyone.
-- Names: the interface in scripts.py; queue(n): the keys of each queue (a promoted or woken job goes
-- where its ${F_PRIORITY} says). stamp: enqueued_at of promoted jobs; keyed: JSON {'<canonical
-- name>\n': the claim's limits entry} of the job types with limit_key; recheck: seconds until a line
-- that still holds jobs is looked at again; hold: seconds a woken job holds its slot.
-- Exceptions to "every key in KEYS": the hash of a due id, known only once read from the scheduled
-- set, and a due scope's line, slots and rate counter and the hashes of the jobs woken from it, known
-- once read from the index (see fair.lua); built from the prefixes in ARGV and KEYS, on this same server.
-- Returns {lost tokens moved, jobs promoted, parked jobs woken}.
${NOW}
${READY}
${FAIR}
local limits = cjson.decode(keyed)
batch, recheck = tonumber(batch), tonumber(recheck)
local reaped = 0
for _, token in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, batch)) do
  redis.call('ZREM', leases, token)
  redis.call('ZADD', lost, now, token)
  reaped = reaped + 1
end

-- Wake the jobs of one due scope's line its key has room for, and say when to look again. A scope
-- whose type has no limit_key here (its limit was removed, or this runjobs runs other code) has no
-- limit: its jobs are all woken, a batch per pass. A line of a paused type is not woken (its jobs
-- could only be parked again); it is looked at again after 'recheck', so a resume wakes it then.
local function look(q, scope)
  local limit = limits[string.match(scope, '^(.*\n)') or '']
  local n, later, slots = batch, now + recheck, nil
  if limit and paused_type(paused, limit) then n = 0
  elseif limit then
    slots = limit.slots_prefix .. scope
    n = math.min(n, room(leases, lost, slots, limit, limit.rate_prefix .. scope .. ':'))
    if limit.rate > 0 then later = math.min(later, (math.floor(now / limit.period) + 1) * limit.period) end
  end
  local woken = unpark(q, scope, math.max(n, 0), slots, tonumber(hold), prefix)
  redis.call('ZADD', q.lines, 'XX', later, scope)  -- unless its line emptied and left the index
  return woken
end

local promoted, woken = 0, 0
for n = 1, queue_count do
  local q = queue(n)
  local due = redis.call('ZRANGEBYSCORE', q.scheduled, '-inf', now, 'LIMIT', 0, batch)
  if #due > 0 then
    local moved = 0
    for _, id in ipairs(due) do
      local key = prefix .. id
      if redis.call('TYPE', key)['ok'] == 'hash' then
        redis.call('HSET', key, '${F_STATUS}', '${QUEUED}', '${F_ENQUEUED_AT}', stamp)
        ready(q, id, priority_in(key), false)
        moved = moved + 1
      else
        -- its hash vanished, or the key is not a hash: dead-lettered from what is left, never queued
        redis.call('ZADD', dying, now, id)
      end
    end
    redis.call('ZREM', q.scheduled, unpack(due))
    if moved > 0 then
      redis.call('SADD', queues_set, q.list)
      for i = 1, math.min(moved, 64) do redis.call('RPUSH', q.wake, 1) end
      redis.call('LTRIM', q.wake, 0, 63)
    end
    promoted = promoted + moved
  end
  local lines = redis.pcall('ZRANGEBYSCORE', q.lines, '-inf', now, 'LIMIT', 0, batch)
  for _, scope in ipairs(lines.err and {} or lines) do  -- an index of the wrong type: moved aside
    local ok, count = pcall(look, q, scope)
    if ok then woken = woken + count
    else redis.pcall('ZADD', q.lines, now + recheck, scope) end  -- a broken key of its own: not again at once
  end
end
return {reaped, promoted, woken}
