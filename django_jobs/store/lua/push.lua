-- Push jobs. KEYS[1]: the set of queue keys; then five keys per queue (its list, scheduled set,
-- wake list, high and low priority sets), one key per job (its hash), and one per unique key (its marker).
-- ARGV[1]: JSON list of [id, index of its queue's list key (scheduled = +1, wake = +2, high = +3,
-- low = +4), due (0 = now), [field, value, ...], index of its unique marker key or 0, debounce seconds,
-- index of its hash key, priority];
-- ARGV[2]: wake list cap; ARGV[3]: seconds a unique key's marker (and a replaced job's tombstone) lives;
-- ARGV[4]: the job hash prefix, ARGV[5]: the scheduled set prefix.
-- Exception to "every key in KEYS": the hash of the job already holding a unique key, and that job's
-- scheduled set, are only known once the marker is read; they are built from the prefixes in ARGV and
-- live on this same server (RQ keeps job hashes beside their queues).
-- Returns the ids not pushed: already in Redis (a second push of an id is a no-op), a duplicate of a
-- queued or running job with the same unique key, or a debounced job that a newer one already replaced.
-- A unique key is one namespace for every job (the key names the job if it must), so a job queued under
-- an alias and one under its current name hold the same key.
${NOW}
${READY}
local jobs = cjson.decode(ARGV[1])
local seen = {}
local queues = {}
local pending = {${QUEUED} = true, ${STARTED} = true, ${SCHEDULED} = true}

-- {status, origin, created_at} of the job holding a unique key; {} if its hash is gone or not a hash.
local function holder_fields(holder)
  local got = redis.pcall('HMGET', ARGV[4] .. holder, 'status', 'origin', 'created_at')
  if got.err then return {} end
  return got
end

local function created(flat)
  for i = 1, #flat, 2 do
    if flat[i] == 'created_at' then return tostring(flat[i + 1]) end
  end
  return ''
end

-- A replaced job stays as a small tombstone, so no later push of its id (the relay pushing its
-- outbox row) runs it; it outlives the unique key's marker.
local function tombstone(key, by, fields)
  if fields then redis.call('HSET', key, unpack(fields)) end
  redis.call('HDEL', key, 'data')
  redis.call('HSET', key, 'status', '${CANCELED}', 'dj_replaced_by', by)
  redis.call('EXPIRE', key, ARGV[3])
end

for _, j in ipairs(jobs) do
  local id, q, due, debounce = j[1], j[2], tonumber(j[3]), tonumber(j[6])
  local key = KEYS[j[7]]
  local skip = redis.call('EXISTS', key) == 1
  local replaced_by = nil
  if not skip and j[5] > 0 then
    local marker = KEYS[j[5]]
    local holder = redis.call('GET', marker)
    local held = holder and holder_fields(holder) or {}
    if holder and debounce > 0 then
      -- debounce: the newest enqueue replaces one that is still waiting out its window
      if (held[3] or '') > created(j[4]) then
        replaced_by = holder  -- this one is older: it arrives after the job that replaced it
      elseif held[1] == '${SCHEDULED}' then
        -- in its own queue's scheduled set: a deploy may have moved the job to another queue
        local sched = held[2] and (ARGV[5] .. held[2]) or KEYS[q + 1]
        if redis.call('ZREM', sched, holder) == 1 then
          tombstone(ARGV[4] .. holder, id, nil)
        end
      end
    elseif holder and pending[held[1] or ''] then
      skip = true
    end
    if not skip and not replaced_by then redis.call('SET', marker, id, 'EX', ARGV[3]) end
    if debounce > 0 then due = now + debounce end
  end
  if replaced_by then
    tombstone(key, replaced_by, j[4])
    table.insert(seen, id)
  elseif skip then
    table.insert(seen, id)
  else
    -- The queue (or scheduled set) first: if that key is broken the script stops before the job
    -- hash exists, so a later push of this id (the relay's) is not mistaken for "already there".
    if due > 0 then
      redis.call('ZADD', KEYS[q + 1], due, id)
      redis.call('HSET', key, unpack(j[4]))
      redis.call('HSET', key, 'status', '${SCHEDULED}')
    else
      ready(KEYS[q], KEYS[q + 3], KEYS[q + 4], id, j[8], false)
      redis.call('HSET', key, unpack(j[4]))
      queues[q] = (queues[q] or 0) + 1
    end
  end
end
for q, n in pairs(queues) do
  redis.call('SADD', KEYS[1], KEYS[q])
  local tokens = {}
  for i = 1, math.min(n, tonumber(ARGV[2])) do tokens[i] = '1' end
  redis.call('RPUSH', KEYS[q + 2], unpack(tokens))
  redis.call('LTRIM', KEYS[q + 2], 0, tonumber(ARGV[2]) - 1)
end
return seen
