-- Put the parked jobs of one job type in one queue back at the head of that queue, in their order:
-- a resume, or maintenance releasing the jobs of a type that is no longer paused (a resume that died
-- half-way, a pause removed by hand).
-- KEYS[1] the paused hash, KEYS[2] the set of parked lists, KEYS[3] the parked list, KEYS[4..6] its
-- queue's list, high and low priority sets, KEYS[7] its wake list, KEYS[8] the set of queue keys.
-- ARGV[1] the type's field in the paused hash, ARGV[2] at most this many jobs move, ARGV[3] the job
-- hash prefix, ARGV[4] the queue, ARGV[5] the type's name (the two make the list's member of KEYS[2]).
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
local want = {'list', 'list', 'zset', 'zset', 'list'}
for i, kind in ipairs(want) do
  local found = redis.call('TYPE', KEYS[i + 2])['ok']
  if found ~= kind and found ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i + 2] .. ' is a ' .. found .. ', not a ' .. kind)
  end
end
local ids, moved = {}, 0
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local ended = {${FINISHED} = true, ${FAILED} = true, ${CANCELED} = true}
  ids = redis.call('LRANGE', KEYS[3], -tonumber(ARGV[2]), -1)
  for i = #ids, 1, -1 do
    local id, key = ids[i], ARGV[3] .. ids[i]
    local status = redis.pcall('HGET', key, 'status')
    if type(status) ~= 'string' or not ended[status] then
      redis.pcall('HDEL', key, 'dj_parked')
      ready(KEYS[4], KEYS[5], KEYS[6], id, priority_in(key), true)
      moved = moved + 1
    end
  end
  redis.call('LTRIM', KEYS[3], 0, -(#ids + 1))
end
local left = redis.call('LLEN', KEYS[3])
-- an empty list leaves the set (a claim that parks again adds it back)
if left == 0 then redis.pcall('SREM', KEYS[2], cjson.encode({ARGV[4], ARGV[5]})) end
if moved > 0 then
  redis.pcall('SADD', KEYS[8], KEYS[4])
  for i = 1, math.min(moved, 64) do redis.call('RPUSH', KEYS[7], 1) end
  redis.call('LTRIM', KEYS[7], 0, 63)
end
return {moved, left}
