-- Limits per key (a job type's limit_key): a scope is '<canonical name>\n<key value>'. A job over its
-- scope's limit is parked in the scope's line of its queue, the sorted set '<index>\n<scope>' (index:
-- the queue's djjobs:parked:<queue>) scored by the job's turn: first parked, first out. It keeps its
-- turn on its hash (dj_turn) until it starts, so a job woken and then parked again goes back to its
-- place, not to the end. The index lists the scopes whose line holds jobs, scored by when maintenance
-- looks at the line next. The end of an attempt frees its slot and wakes the next parked job
-- (next_turn); maintenance wakes what a wake-up missed. Goes after the NOW and READY snippets.
-- Keys built here: a scope's line (the index key, '\n', the scope) and slots and rate counter (from
-- the prefixes its caller passes), and the hash of a woken job (from the job hash prefix).

-- How many slots of a scope's live leases hold; the slots whose lease is gone are freed.
local function live(leases, slots)
  local n = 0
  for _, member in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
    if redis.call('ZSCORE', leases, member) then n = n + 1
    else redis.call('ZREM', slots, member) end
  end
  return n
end

-- How many more jobs of a scope may start now. s: {concurrency, rate count, rate period, the prefix of
-- the scope's rate counters}; 0 means no such limit.
local function room(leases, slots, s)
  local free = s[1] > 0 and s[1] - live(leases, slots) or math.huge
  if s[2] > 0 then
    local started = tonumber(redis.call('GET', s[4] .. math.floor(now / s[3]))) or 0
    free = math.min(free, s[2] - started)
  end
  return free
end

-- Park the job id (hash key) in its scope's line of the queue whose index is given: at its own turn
-- if it had one, else after every job parked so far. The index looks at the line by 'due' at the
-- latest. Every read comes before the first write, so a key of the wrong type changes nothing.
local function park(index, scope, id, key, turn, due)
  local line = index .. '\n' .. scope
  local at = redis.call('ZSCORE', index, scope)
  if not turn then
    local last = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')
    turn = math.max(math.floor(now * 1000000), (tonumber(last[2]) or 0) + 1)
  end
  turn = string.format('%.0f', turn)  -- a turn (microseconds) needs all 16 digits
  redis.call('ZADD', line, turn, id)
  redis.call('HSET', key, 'dj_parked', scope, 'dj_turn', turn)
  if not at or tonumber(at) > due then redis.call('ZADD', index, due, scope) end
end

-- Move up to n jobs from the head of a scope's line to the end of their priority on the queue (list,
-- high, low), with a wake token each; the scope leaves the index once its line is empty.
-- prefix: the job hash prefix. Returns how many moved.
local function unpark(index, line, scope, n, list, high, low, wake, prefix)
  local moved = 0
  while moved < n do
    local top = redis.call('ZPOPMIN', line)
    if not top[1] then break end
    local key = prefix .. top[1]
    redis.pcall('HDEL', key, 'dj_parked')  -- not a hash: the claim sets it aside like any such id
    ready(list, high, low, top[1], priority_in(key), false)
    moved = moved + 1
  end
  if moved > 0 then
    for _ = 1, math.min(moved, 64) do redis.call('RPUSH', wake, 1) end
    redis.call('LTRIM', wake, 0, 63)
  end
  if redis.call('ZCARD', line) == 0 then redis.call('ZREM', index, scope) end
  return moved
end

-- The attempt holding the slot 'token' of a scope ended: free the slot, and if the scope has room,
-- wake the next job parked in its line. s: {concurrency, rate count, rate period, rate counter
-- prefix, job hash prefix, scope}.
local function next_turn(leases, slots, line, index, s, list, high, low, wake, token)
  redis.call('ZREM', slots, token)
  if redis.call('EXISTS', line) == 1 and room(leases, slots, s) > 0 then
    unpark(index, line, s[6], 1, list, high, low, wake, s[5])
  end
end
