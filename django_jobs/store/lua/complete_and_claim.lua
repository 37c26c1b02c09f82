-- Finish the previous job, then claim the next one from the queues (in priority order).
-- KEYS[1] leases, KEYS[2] dying, KEYS[3] vanished, KEYS[4] the paused hash, KEYS[5] the set of parked
-- lists; then five keys per queue (its list, scheduled set, wip set, high and low priority sets);
-- then the slot keys of the limited job names, and one parked list per queue of each paused job type;
-- then, when a job finished, its wip set and its hash.
-- ARGV[1] finished token or '', ARGV[2] number of queues, ARGV[3] ended_at, ARGV[4] finished ttl,
-- ARGV[5] worker name, ARGV[6] lease seconds, ARGV[7] started_at, ARGV[8] nonce,
-- ARGV[9] JSON {job name or alias: [concurrency, rate count, rate period, index of its slot key or 0,
-- rate counter prefix, and while its type is paused: its field in the paused hash, the index of its
-- first parked list (one per queue, in order), its canonical name]} (slots, rate windows and parked
-- lists are keyed by the canonical name, so aliases share them),
-- ARGV[10] seconds a limited job waits, ARGV[11] the job hash prefix, ARGV[11 + n] the name of queue n,
-- and last, the finished job's return value as JSON, or '' (not kept).
-- Exceptions to "every key in KEYS": the hash of a popped id (known only once popped), and a rate
-- counter (its name holds the window, from Redis time); both built from prefixes in ARGV, on this server.
-- The attempt counter goes up at claim time, so an attempt whose worker dies still counts.
-- A job that never started (no attempt counted: a snooze gives its attempt back) and whose dj_expires
-- (Unix time) has passed is not run: it ends canceled with dj_expired, and is reported to the caller.
-- Per queue the high set's head goes first, then the list's, then the low set's (see ready.lua).
-- Nothing after the pop may raise unless it first puts the id back (put_back): a script error would
-- otherwise leave the popped id nowhere.
-- A job whose type is paused (its limits say so, and the paused hash still does: a resume may have
-- come since the worker last looked) is parked instead: no attempt, no lease, its order kept.
-- Returns {finished_ok, expired, queue number, id, token, fields} (fields as they were before the
-- claim), {finished_ok, expired, 'deferred'} after deferring, parking or dropping a batch of jobs, or
-- {finished_ok, expired}; expired is {queue number, id, fields, ...} of each job it dropped because it
-- expired, or false (nil to the caller) when none did.
${NOW}
local leases, dying, vanished, paused, parked_lists = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local finished = 0
if ARGV[1] ~= '' then
  if redis.call('ZREM', leases, ARGV[1]) == 1 then
    finished = 1
    redis.call('ZREM', KEYS[#KEYS - 1], ARGV[1])
    redis.call('HSET', KEYS[#KEYS], 'status', '${FINISHED}', 'ended_at', ARGV[3])
    if ARGV[#ARGV] ~= '' then redis.call('HSET', KEYS[#KEYS], 'dj_result', ARGV[#ARGV]) end
    redis.call('EXPIRE', KEYS[#KEYS], ARGV[4])
  end
end
local limits = cjson.decode(ARGV[9])
local backoff = tonumber(ARGV[10])
local deferred, parked = 0, 0
local expired = false  -- a table once a job expired: the plain path builds none

-- The limits of a job by its stored name: ours is the bare name, RQ's is the call 'name(args...)'.
local function limit_of(name)
  return limits[name] or limits[string.match(name, '^[^(]*')]
end

-- A job over its type's concurrency or rate limit waits in the scheduled set; no attempt is spent.
local function blocked(limit)
  if not limit then return nil end
  if limit[1] > 0 then
    local slots = KEYS[limit[4]]
    local live = 0
    for _, member in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
      if redis.call('ZSCORE', leases, member) then live = live + 1
      else redis.call('ZREM', slots, member) end  -- its lease is gone: the slot is free again
    end
    if live >= limit[1] then return backoff end
  end
  if limit[2] > 0 then
    local window = math.floor(now / limit[3])
    local counter = limit[5] .. window
    local started = redis.call('INCR', counter)
    if started == 1 then redis.call('EXPIRE', counter, math.ceil(limit[3]) + 1) end
    if started > limit[2] then return (window + 1) * limit[3] - now end
  end
  return nil
end

-- Where the id in hand was popped from, and its score there (nil: the list), for put_back.
local source, score

-- The next ready id of one queue: the high set's head, else the list's, else the low set's.
local function take(list, high, low)
  local top = redis.call('ZPOPMIN', high)
  if top[1] then
    source, score = high, top[2]
    return top[1]
  end
  source, score = list, nil
  local id = redis.call('LPOP', list)
  if id then return id end
  top = redis.call('ZPOPMIN', low)
  if top[1] then source, score = low, top[2] end
  return top[1] or false
end

-- A write after the pop failed (a structure key of the wrong type): put the id back where it was,
-- at the head, and fail the claim, so the job is not lost; maintenance moves the broken key aside.
local function put_back(id, err)
  if score then redis.call('ZADD', source, score, id) else redis.call('LPUSH', source, id) end
  error(err)
end

local function must(id, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then put_back(id, reply) end
  return reply
end

-- A job that never started (no attempt counted) whose expiry has passed is never run: it ends canceled
-- with dj_expired, before its pause and limits are looked at (it is not parked, takes no slot and starts
-- no rate window), and is reported to the caller. The caller checks first: a plain job costs no call.
local function expire(n, id, key, fields)
  must(id, 'HSET', key, 'status', '${CANCELED}', 'ended_at', ARGV[3], 'dj_expired', ARGV[3])
  redis.call('EXPIRE', key, ARGV[4])  -- kept like a finished job's: a duplicate push stays a no-op
  expired = expired or {}
  local e = #expired
  expired[e + 1], expired[e + 2], expired[e + 3] = n, id, fields
end

-- Whether the job in hand belongs to a paused type; only asked of jobs whose limits say it is.
local function held(id, limit)
  if not (limit and limit[6]) then return false end
  return must(id, 'HEXISTS', paused, limit[6]) == 1
end

-- Park the job in hand at the tail of its type's parked list for queue n: it keeps its attempt count,
-- status (queued) and order, and a resume puts it back at the head of its queue.
local function park(id, key, limit, n)
  must(id, 'SADD', parked_lists, cjson.encode({ARGV[11 + n], limit[8]}))
  must(id, 'RPUSH', KEYS[limit[7] + n - 1], id)
  redis.call('HSET', key, 'dj_parked', limit[8])
end

for n = 1, tonumber(ARGV[2]) do
  local list, sched, wip, high, low = unpack(KEYS, 5 * n + 1, 5 * n + 5)
  local id = take(list, high, low)
  while id do
    local key = ARGV[11] .. id
    local fields = {}
    if #id > 64 or not string.match(id, '^[A-Za-z0-9_%-]+$$') then
      -- an id django_jobs never makes (the id rule: JOB_ID): never run, never handed to a worker
      -- (whose reports it could garble); quarantined from its raw bytes by the dying scan
      fields = {err = 'id'}
    else
      fields = redis.pcall('HGETALL', key)
    end
    if fields.err then
      -- not a hash at all: a poison entry, dead-lettered from its raw bytes
      must(id, 'ZADD', dying, now, id)
    elseif #fields > 0 then
      local attempt, name, workers, expires = 0, '', nil, nil
      for i = 1, #fields, 2 do
        if fields[i] == 'dj_attempt' then attempt = tonumber(fields[i + 1]) or 0
        elseif fields[i] == 'description' then name = fields[i + 1]
        elseif fields[i] == 'dj_workers' then workers = fields[i + 1]
        elseif fields[i] == 'dj_expires' then expires = tonumber(fields[i + 1]) end
      end
      if expires and attempt == 0 and now >= expires then
        expire(n, id, key, fields)
      else
        local limit = limit_of(name)
        local parking = held(id, limit)
        local checked, wait = true, nil
        if not parking then checked, wait = pcall(blocked, limit) end  -- a parked job takes no slot or rate
        if not checked then put_back(id, wait) end  -- a slot or rate key of the wrong type
        if parking then
          park(id, key, limit, n)
          parked = parked + 1
        elseif wait then
          must(id, 'ZADD', sched, now + wait + deferred * 0.01, id)
          redis.call('HSET', key, 'status', '${SCHEDULED}')
          deferred = deferred + 1
        else
          local token = id .. ':' .. ARGV[8]
          must(id, 'ZADD', leases, now + tonumber(ARGV[6]), token)
          -- every attempt's worker, newest last (the oldest dropped past 4 kB), and the first start
          workers = workers and string.sub(workers .. '\n' .. ARGV[5], -4096) or ARGV[5]
          -- one HSET: on the first attempt its start is also the first start (a key written again: harmless)
          redis.call('HSET', key, 'status', '${STARTED}', 'started_at', ARGV[7], 'worker_name', ARGV[5],
                     'last_heartbeat', ARGV[7], 'dj_attempt', math.floor(attempt) + 1, 'dj_workers', workers,
                     attempt == 0 and 'dj_first_started' or 'started_at', ARGV[7])
          redis.pcall('ZADD', wip, '+inf', token)  -- RQ's registry: for its tools only
          if limit and limit[1] > 0 then
            redis.pcall('ZADD', KEYS[limit[4]], now, token)
          end
          return {finished, expired, n, id, token, fields}
        end
      end
      -- a batch of parked, deferred or expired jobs ends this script; the caller claims again, behind them
      if parked >= 100 or deferred + (expired and #expired / 3 or 0) >= 20 then
        return {finished, expired, 'deferred'}
      end
    else
      -- its hash is gone (evicted, deleted): nothing to run, but never dropped without a trace
      redis.pcall('ZADD', vanished, now, ARGV[11 + n] .. '\n' .. id)
    end
    id = take(list, high, low)
  end
end
return {finished, expired}
