-- Put the parked jobs of one job type in one queue back at the head of that queue, in their order:
-- a resume, or maintenance releasing the jobs of a type that is no longer paused (a resume that died
-- half-way, a pause removed by hand).
-- Names: the interface in scripts.py. parked: the parked list; queue: its queue's keys; field: the
-- type's field in the paused hash; batch: at most this many jobs move; queue_name and name (the
-- type's) make the list's member of parked_lists.
-- The check that the type is not paused and the moves are one step: a pause (a resume undone) that
-- comes first keeps the jobs parked, and a claim that parks after it finds the type running.
-- Exception to "every key in KEYS": the hash of a parked id, known only once read from the list.
-- A batch is taken from the list's tail and each of its jobs goes to the head of its priority, the
-- newest first, so the oldest ends up first. The keys it writes are checked first: nothing is
-- written unless every move can be made, so no id is ever in two places or in none. An id whose
-- hash is gone goes back too (the claim dead-letters it as vanished); one whose job ended meanwhile
-- is dropped (nothing to run).
-- Returns {moved, ids left in the list}; nothing moves while the type is paused.
${READY}
local want = {{parked, 'list'}, {queue.list, 'list'}, {queue.high, 'zset'}, {queue.low, 'zset'}, {queue.wake, 'list'}}
for _, place in ipairs(want) do
  local found = redis.call('TYPE', place[1])['ok']
  if found ~= place[2] and found ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. place[1] .. ' is a ' .. found .. ', not a ' .. place[2])
  end
end
local ids, moved = {}, 0
if redis.call('HEXISTS', paused, field) == 0 then
  local ended = {${FINISHED} = true, ${FAILED} = true, ${CANCELED} = true}
  ids = redis.call('LRANGE', parked, -tonumber(batch), -1)
  for i = #ids, 1, -1 do
    local id, key = ids[i], prefix .. ids[i]
    local status = redis.pcall('HGET', key, '${F_STATUS}')
    if type(status) ~= 'string' or not ended[status] then
      redis.pcall('HDEL', key, '${F_PARKED}')
      ready(queue, id, priority_in(key), true)
      moved = moved + 1
    end
  end
  redis.call('LTRIM', parked, 0, -(#ids + 1))
end
local left = redis.call('LLEN', parked)
-- an empty list leaves the set (a claim that parks again adds it back)
if left == 0 then redis.pcall('SREM', parked_lists, cjson.encode({queue_name, name})) end
if moved > 0 then
  redis.pcall('SADD', queues_set, queue.list)
  for i = 1, math.min(moved, 64) do redis.call('RPUSH', queue.wake, 1) end
  redis.call('LTRIM', queue.wake, 0, 63)
end
return {moved, left}
