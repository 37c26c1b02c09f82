-- Where a ready id waits: priority 0 in the queue's list (RQ's own, as without priorities), a
-- priority above 0 in the queue's high set, below 0 in its low set. In a set each priority owns a
-- band of 2^44 scores (BAND) starting at (100 - priority) * BAND, so ZPOPMIN takes the highest
-- priority first; within a band an id goes one past the last (FIFO) or, at_head, one before the
-- first. Scores are integers below 2^53, exact in a double, written with %.0f: Lua's own
-- number-to-string conversion (`..`) would keep only 14 digits.

-- The priority a job hash records; 0 when absent, not a hash, or nothing django_jobs writes.
local function priority_in(key)
  local p = tonumber(redis.pcall('HGET', key, '${F_PRIORITY}'))
  if p and p >= -100 and p <= 100 and p == math.floor(p) then return p end
  return 0
end

-- The last score this script gave each band at its tail: a batch (a push, a promotion) looks the
-- band's tail up once. Nothing else writes while a script runs.
local tails = {}

-- queue: its keys, as every script is given them (list, high, low ...).
local function ready(queue, id, priority, at_head)
  if priority == 0 then
    if at_head then redis.call('LPUSH', queue.list, id) else redis.call('RPUSH', queue.list, id) end
    return
  end
  local set = priority > 0 and queue.high or queue.low
  local band = ${BAND}
  local base = (100 - priority) * band
  local tail = set .. '\n' .. priority
  local score = not at_head and tails[tail]
  if score then
    score = score + 1
  else
    local first, past = string.format('%.0f', base), string.format('(%.0f', base + band)
    local edge
    if at_head then
      edge = redis.call('ZRANGEBYSCORE', set, first, past, 'WITHSCORES', 'LIMIT', 0, 1)
    else
      edge = redis.call('ZREVRANGEBYSCORE', set, past, first, 'WITHSCORES', 'LIMIT', 0, 1)
    end
    score = edge[2] and tonumber(edge[2]) + (at_head and -1 or 1) or base + band / 2
  end
  if not at_head then tails[tail] = score end
  redis.call('ZADD', set, string.format('%.0f', score), id)
end
