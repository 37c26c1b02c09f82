-- Push jobs. Names: the interface in scripts.py; queue(n): the keys of each queue of the batch,
-- job(i): the hash of its i-th job, marker(n): each unique key's marker. jobs: JSON list of [id, its
-- queue's number, due (0 = now), [field, value, ...], its marker's number or 0, debounce seconds,
-- priority]; wake_cap: the wake list's cap; unique_ttl: seconds a unique key's marker (and a replaced
-- job's tombstone) lives; prefix: the job hash prefix, sched_prefix: the scheduled set prefix.
-- Exception to "every key in KEYS": the hash of the job already holding a unique key, and that job's
-- scheduled set, are only known once the marker is read; they are built from the prefixes in ARGV and
-- live on this same server (RQ keeps job hashes beside their queues).
-- Returns the ids not pushed: already in Redis (a second push of an id is a no-op), a duplicate of a
-- queued or running job with the same unique key, or a debounced job that a newer one already replaced.
-- A unique key is one namespace for every job (the key names the job if it must), so a job queued under
-- an alias and one under its current name hold the same key.
${NOW}
${READY}
local batch = cjson.decode(jobs)
local seen = {}
local queues = {}
local pending = {${QUEUED} = true, ${STARTED} = true, ${SCHEDULED} = true}

-- {status, origin, created_at} of the job holding a unique key; {} if its hash is gone or not a hash.
local function holder_fields(holder)
  local got = redis.pcall('HMGET', prefix .. holder, '${F_STATUS}', '${F_ORIGIN}', '${F_CREATED_AT}')
  if got.err then return {} end
  return got
end

local function created(flat)
  for i = 1, #flat, 2 do
    if flat[i] == '${F_CREATED_AT}' then return tostring(flat[i + 1]) end
  end
  return ''
end

-- A replaced job stays as a small tombstone, so no later push of its id (the relay pushing its
-- outbox row) runs it; it outlives the unique key's marker.
local function tombstone(key, by, fields)
  if fields then redis.call('HSET', key, unpack(fields)) end
  redis.call('HDEL', key, '${F_DATA}')
  redis.call('HSET', key, '${F_STATUS}', '${CANCELED}', '${F_REPLACED_BY}', by)
  redis.call('EXPIRE', key, unique_ttl)
end

-- Each queue's keys by its number, made at its first job (a table a script makes costs on each call).
local queue_of = {}

for i, j in ipairs(batch) do
  local q = queue_of[j[2]]
  if not q then q = queue(j[2]); queue_of[j[2]] = q end
  local id, due, debounce = j[1], tonumber(j[3]), tonumber(j[6])
  local key = job(i)
  local skip = redis.call('EXISTS', key) == 1
  local replaced_by = nil
  if not skip and j[5] > 0 then
    local held_by = marker(j[5])
    local holder = redis.call('GET', held_by)
    local held = holder and holder_fields(holder) or {}
    if holder and debounce > 0 then
      -- debounce: the newest enqueue replaces one that is still waiting out its window
      if (held[3] or '') > created(j[4]) then
        replaced_by = holder  -- this one is older: it arrives after the job that replaced it
      elseif held[1] == '${SCHEDULED}' then
        -- in its own queue's scheduled set: a deploy may have moved the job to another queue
        local sched = held[2] and (sched_prefix .. held[2]) or q.scheduled
        if redis.call('ZREM', sched, holder) == 1 then
          tombstone(prefix .. holder, id, nil)
        end
      end
    elseif holder and pending[held[1] or ''] then
      skip = true
    end
    if not skip and not replaced_by then redis.call('SET', held_by, id, 'EX', unique_ttl) end
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
      redis.call('ZADD', q.scheduled, due, id)
      redis.call('HSET', key, unpack(j[4]))
      redis.call('HSET', key, '${F_STATUS}', '${SCHEDULED}')
    else
      ready(q, id, j[7], false)
      redis.call('HSET', key, unpack(j[4]))
      queues[j[2]] = (queues[j[2]] or 0) + 1
    end
  end
end
for number, n in pairs(queues) do
  local q = queue_of[number]
  redis.call('SADD', queues_set, q.list)
  local tokens = {}
  for i = 1, math.min(n, tonumber(wake_cap)) do tokens[i] = '1' end
  redis.call('RPUSH', q.wake, unpack(tokens))
  redis.call('LTRIM', q.wake, 0, tonumber(wake_cap) - 1)
end
return seen
