-- Limits per key (a job type's limit_key): a scope is '<canonical name>\n<key value>'. A job over its
-- scope's limit is parked in the scope's line of its queue, the sorted set '<index>\n<scope>' (index:
-- the queue's djjobs:parked:<queue>) scored by the job's turn, and a new job of a scope whose line
-- holds jobs goes behind them: first come, first served, per key. A parked job's hash says where it
-- waits (${F_LINE}: its scope; ${F_TURN}: its turn) until it starts. The index lists the scopes whose
-- line holds jobs, scored by when maintenance looks at the line next.
-- The end of an attempt frees its slot and wakes the next parked job (next_turn): back to the end of
-- its priority on its queue, holding the slot for itself (a reservation: its bare id in the scope's
-- slots, scored by when the hold lapses) until it is claimed, so no newcomer takes it. A woken job
-- that still finds no room goes back to its own turn. A job that goes back to the head of its queue
-- (its worker died, or runjobs handed it back) keeps its slot the same way, and the front of its line
-- (keep_turn). Maintenance wakes what a wake-up missed. While its type is paused a line is not woken
-- (its jobs could only be parked again) and a keyed job the claim meets waits in its line, so the line
-- stays the one place that orders a key's jobs; a job that comes back with its turn never starts
-- while a job of its key with an earlier turn waits (before).
-- Goes after the NOW and READY snippets. A queue is the table of its keys every script is given (its
-- index of lines: queue.lines); a scope's keys are {slots = ..., line = ...}, and its limits (the JSON
-- of Scope.arg, decoded) {concurrency, rate, period, rate_prefix (of its counters), prefix (of the job
-- hashes), scope (its name), hold (seconds a woken job holds its slot)}; 0 means no such limit.
-- Keys its callers may build: a scope's line (the index key, '\n', the scope), slots and rate counter
-- (from the prefixes in the limits), a woken job's hash, and the hash of a job holding a slot for its
-- turn.

-- A job hash's key value (${F_LIMIT_KEY}) and turn (${F_TURN}), from its HGETALL reply: read only for
-- a job whose type has limit_key, so that a plain job's claim does not look for them.
local function key_of(fields)
  local value, turn
  for i = 1, #fields, 2 do
    if fields[i] == '${F_LIMIT_KEY}' then value = fields[i + 1]
    elseif fields[i] == '${F_TURN}' then turn = tonumber(fields[i + 1]) end
  end
  return value, turn
end

-- How many slots are held: by a live lease (a token '<id>:<nonce>'), or by an attempt whose lease
-- expired but which is not settled yet (in lost, when given), or by a woken job whose hold has not
-- lapsed (its bare id). The others are freed.
local function live(leases, lost, slots)
  local n, held = 0, redis.call('ZRANGE', slots, 0, -1, 'WITHSCORES')
  for i = 1, #held, 2 do
    local alive
    if string.find(held[i], ':', 1, true) then
      alive = redis.call('ZSCORE', leases, held[i]) or (lost and redis.call('ZSCORE', lost, held[i]))
    else
      alive = tonumber(held[i + 1]) > now
    end
    if alive then n = n + 1 else redis.call('ZREM', slots, held[i]) end
  end
  return n
end

-- How many more jobs of a scope may start now, by its limits (concurrency, rate, period) and the
-- prefix of its rate counters.
local function room(leases, lost, slots, limits, counters)
  local free = limits.concurrency > 0 and limits.concurrency - live(leases, lost, slots) or math.huge
  if limits.rate > 0 then
    local started = tonumber(redis.call('GET', counters .. math.floor(now / limits.period))) or 0
    free = math.min(free, limits.rate - started)
  end
  return free
end

-- Whether a job of a scope that has not started comes before the job id (its turn; nil: a job new to
-- its line, behind every one of them): the head of its line (the key 'line') with an earlier turn, or
-- another woken job (a live hold in 'slots') with an earlier turn. prefix: the job hash prefix.
local function before(line, slots, id, turn, prefix)
  local head = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
  if head[1] and (not turn or tonumber(head[2]) < turn) then return true end
  for _, held in ipairs(redis.call('ZRANGEBYSCORE', slots, '(' .. now, '+inf')) do
    if held ~= id and not string.find(held, ':', 1, true) then
      local theirs = tonumber(redis.pcall('HGET', prefix .. held, '${F_TURN}'))
      if not turn or (theirs and theirs < turn) then return true end
    end
  end
  return false
end

-- Whether the job type of a scope is paused (the paused hash, the field in its limits): its line
-- is not woken, its jobs could only be parked again.
local function paused_type(paused, limits)
  return limits.paused_field ~= nil and redis.call('HEXISTS', paused, limits.paused_field) == 1
end

-- Park the job id (hash key) in its scope's line of the queue: at its own turn if it had one, else
-- after every job parked so far. The queue's index looks at the line by 'due' at the latest. Every
-- read comes before the first write, so a key of the wrong type changes nothing.
local function park(queue, scope, id, key, turn, due)
  local line = queue.lines .. '\n' .. scope
  local at = redis.call('ZSCORE', queue.lines, scope)
  if not turn then
    local last = redis.call('ZRANGE', line, -1, -1, 'WITHSCORES')
    turn = math.max(math.floor(now * 1000000), (tonumber(last[2]) or 0) + 1)
  end
  turn = string.format('%.0f', turn)  -- a turn (microseconds) needs all 16 digits
  redis.call('ZADD', line, turn, id)
  redis.call('HSET', key, '${F_LINE}', scope, '${F_TURN}', turn)
  if not at or tonumber(at) > due then redis.call('ZADD', queue.lines, due, scope) end
end

-- Move up to n jobs from the head of a scope's line in the queue to the end of their priority on that
-- queue, a wake token each; each holds a slot of the scope for 'hold' seconds, or, when its limits
-- are not known (no slots), is let go for good, forgetting its turn. The scope leaves the index once
-- its line is empty. prefix: the job hash prefix. Returns how many moved.
local function unpark(queue, scope, n, slots, hold, prefix)
  local line, moved = queue.lines .. '\n' .. scope, 0
  while moved < n do
    local top = redis.call('ZPOPMIN', line)
    if not top[1] then break end
    if slots then redis.call('ZADD', slots, now + hold, top[1])
    else redis.pcall('HDEL', prefix .. top[1], '${F_LINE}', '${F_TURN}') end
    ready(queue, top[1], priority_in(prefix .. top[1]), false)
    moved = moved + 1
  end
  if moved > 0 then
    for _ = 1, math.min(moved, 64) do redis.call('RPUSH', queue.wake, 1) end
    redis.call('LTRIM', queue.wake, 0, 63)
  end
  if redis.call('ZCARD', line) == 0 then redis.call('ZREM', queue.lines, scope) end
  return moved
end

-- The attempt holding the slot 'token' of a scope (its keys; its limits) ended: free the slot, and if
-- the scope has room and its type is not paused, wake the next job parked in its line of the queue.
local function next_turn(leases, lost, scope, limits, queue, token)
  redis.call('ZREM', scope.slots, token)
  if redis.call('EXISTS', scope.line) == 1 and not paused_type(scope.paused, limits)
     and room(leases, lost, scope.slots, limits, limits.rate_prefix) > 0 then
    unpark(queue, limits.scope, 1, scope.slots, limits.hold, limits.prefix)
  end
end

-- The attempt holding the slot 'token' of a scope went back to the head of its queue (job id, hash
-- key): it holds the slot as a woken job does, and should it find no room all the same, it is parked
-- at the front of its line (turn 0).
local function keep_turn(scope, limits, id, key, token)
  redis.call('ZREM', scope.slots, token)
  redis.call('ZADD', scope.slots, now + limits.hold, id)
  redis.call('HSET', key, '${F_LINE}', limits.scope, '${F_TURN}', 0)
end
