-- Finish the previous job, then claim the next one from the queues (in priority order).
-- KEYS[1] leases, KEYS[2] dying, KEYS[3] vanished, KEYS[4] lost, KEYS[5] the paused hash, KEYS[6] the
-- set of parked lists; then six keys per queue (its list, scheduled set, wip set, high and low priority
-- sets, index of lines of jobs parked over their key's limit); then the slot keys of the limited job
-- names, and one parked list per queue of each paused job type; then, when a job finished, its wip
-- set and its hash, and if it had a limit key (limit_key): its scope's slots, its line and its queue's
-- index of lines, then its queue's list, high and low sets and wake list (where its next parked job goes).
-- ARGV[1] finished token or '', ARGV[2] number of queues, ARGV[3] ended_at, ARGV[4] finished ttl,
-- ARGV[5] worker name, ARGV[6] lease seconds, ARGV[7] started_at, ARGV[8] nonce,
-- ARGV[9] JSON {job name or alias: [concurrency, rate count, rate period, index of its slot key or 0,
-- rate counter prefix, and for a name with limit_key or a paused type: the slots prefix and its scope's
-- prefix '<canonical name>\n' (false without limit_key: its limits hold per scope, see fair.lua), and
-- while its type is paused: its field in the paused hash, the index of its first parked list (one per
-- queue, in order), its canonical name]} (slots, rate windows and parked lists are keyed by the
-- canonical name, so aliases share them), ARGV[10] seconds a job over its type's limit waits,
-- ARGV[11] the job hash prefix, ARGV[12] seconds until maintenance looks at a line a job was parked in,
-- ARGV[13] one character per queue, '1' where its high set may hold jobs ('0': the worker's last look,
-- at most a second old, found it empty, so it is looked at only once the list is), ARGV[13 + n] the
-- name of queue n; then the finished job's scope as next_turn reads it (fair.lua) or
-- '', and last its return value as JSON, or '' (not kept).
-- Exceptions to "every key in KEYS": the hash of a popped id (known only once popped), a rate counter
-- (its name holds the window, from Redis time), and a scope's slots, line and rate counters and the
-- hash of a job woken from a line (their names hold the job's key value, known once its hash is read,
-- or the woken id); all built from prefixes in ARGV or KEYS, on this server.
-- The attempt counter goes up at claim time, so an attempt whose worker dies still counts.
-- A job that never started (no attempt counted: a snooze gives its attempt back) and whose dj_expires
-- (Unix time) has passed is not run: it ends canceled with dj_expired, and is reported to the caller.
-- Per queue the high set's head goes first, then the list's, then the low set's (see ready.lua); a high
-- set the worker found empty (ARGV[13]) is asked after the list, so a plain claim runs no extra command.
-- Nothing after the pop may raise unless it first puts the id back (put_back): a script error would
-- otherwise leave the popped id nowhere.
-- The checks of a popped job, in order: expired (dropped), its type paused (parked in the paused list:
-- its limits say so, and the paused hash still does: a resume may have come since the worker last
-- looked; no attempt, no lease, its order kept), over its key's limit or behind the jobs parked for
-- its key (parked in its key's line, fair.lua), over its type's limit (deferred to the scheduled set).
-- Returns {finished_ok, expired, queue number, id, token, fields} (fields as they were before the
-- claim), {finished_ok, expired, 'deferred'} after deferring, parking or dropping a batch of jobs, or
-- {finished_ok, expired}; expired is {queue number, id, fields, ...} of each job it dropped because it
-- expired, or false (nil to the caller) when none did.
${NOW}
-- The functions of limits per key (fair.lua, and ready.lua's they use), made only once a claim or a
-- completion needs them, so that a plain job's claim does not pay for making them.
local made
local function fair()
  if not made then
${READY}
${FAIR}
    made = {live = live, park = park, next_turn = next_turn, key_of = key_of}
  end
  return made
end

local leases, dying, vanished, lost = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local paused, parked_lists = KEYS[5], KEYS[6]
local finished = 0
if ARGV[1] ~= '' then
  local scope = ARGV[#ARGV - 1] ~= '' and cjson.decode(ARGV[#ARGV - 1])
  local done = #KEYS - (scope and 8 or 1)  -- the finished job's wip set; its hash follows
  if redis.call('ZREM', leases, ARGV[1]) == 1 then
    finished = 1
    redis.call('ZREM', KEYS[done], ARGV[1])
    redis.call('HSET', KEYS[done + 1], 'status', '${FINISHED}', 'ended_at', ARGV[3])
    if ARGV[#ARGV] ~= '' then redis.call('HSET', KEYS[done + 1], 'dj_result', ARGV[#ARGV]) end
    redis.call('EXPIRE', KEYS[done + 1], ARGV[4])
    if scope then  -- a broken key of its scope must not undo a completion: maintenance wakes instead
      local q = {KEYS[done + 5], KEYS[done + 6], KEYS[done + 7], KEYS[done + 8]}
      pcall(fair().next_turn, leases, lost, KEYS[done + 2], KEYS[done + 3], KEYS[done + 4], scope, q, ARGV[1])
    end
  end
end
local limited = ARGV[9] ~= '{}'  -- the plain path: no limits and no paused type, nothing to decode
local limits = limited and cjson.decode(ARGV[9]) or {}
local backoff = tonumber(ARGV[10])
local deferred, parked = 0, 0
local expired = false  -- a table once a job expired: the plain path builds none

-- The limits of a job by its stored name: ours is the bare name, RQ's is the call 'name(args...)'.
local function limit_of(name)
  if not limited then return nil end
  return limits[name] or limits[string.match(name, '^[^(]*')]
end

-- Seconds a job over its limit (called only for a job that has one) waits (for its type's concurrency:
-- the backoff; for a scope's, until maintenance looks at its line; for a rate: until the next window),
-- or nil: it may start now, and the start is counted in its rate window. No attempt is spent either
-- way. A job of a scope: a new one waits behind the scope's parked jobs; a woken one (it has its turn)
-- gives up the slot it held first; an attempt whose lease expired holds its slot until it is settled
-- (a type's: only while its lease lives).
local function blocked(limit, scope, id, turn, index)
  local slots, recheck = scope and limit[6] .. scope or KEYS[limit[4]], tonumber(ARGV[12])
  if scope and turn then redis.call('ZREM', slots, id)
  elseif scope and redis.call('EXISTS', index .. '\n' .. scope) == 1 then return recheck end
  if limit[1] > 0 and fair().live(leases, scope and lost, slots) >= limit[1] then
    return scope and recheck or backoff
  end
  if limit[2] > 0 then
    local window = math.floor(now / limit[3])
    local counter = (scope and limit[5] .. scope .. ':' or limit[5]) .. window
    local started = redis.call('INCR', counter)
    if started == 1 then redis.call('EXPIRE', counter, math.ceil(limit[3]) + 1) end
    if started > limit[2] then return (window + 1) * limit[3] - now end
  end
  return nil
end

-- Where the id in hand was popped from, and its score there (nil: the list), for put_back.
local source, score

-- The head of one of a queue's sorted sets (popped), or nil.
local function pop(set)
  local top = redis.call('ZPOPMIN', set)
  if top[1] then source, score = set, top[2] end
  return top[1]
end

-- The next ready id of queue n: the high set's head, else the list's, else the low set's. A high set
-- the worker last found empty is asked only once the list is empty.
local function take(n, list, high, low)
  local first = string.sub(ARGV[13], n, n) == '1'
  local id = first and pop(high)
  if id then return id end
  source, score = list, nil
  id = redis.call('LPOP', list)
  if id then return id end
  return (not first and pop(high)) or pop(low) or false
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
  if not (limit and limit[8]) then return false end
  return must(id, 'HEXISTS', paused, limit[8]) == 1
end

-- Park the job in hand at the tail of its type's parked list for queue n: it keeps its attempt count,
-- status (queued) and order (and a job of a scope its turn), and a resume puts it back at the head of
-- its queue.
local function park(id, key, limit, n)
  must(id, 'SADD', parked_lists, cjson.encode({ARGV[13 + n], limit[10]}))
  must(id, 'RPUSH', KEYS[limit[9] + n - 1], id)
  redis.call('HSET', key, 'dj_parked', limit[10])
end

-- The scope of a job whose type's limits hold per key (limit_key), and its turn if it was parked in
-- the scope's line; nil for a plain job, which costs no look.
local function scope_of(limit, fields)
  if not (limit and limit[7]) then return nil, nil end
  local value, turn = fair().key_of(fields)
  return value and limit[7] .. value, turn
end

-- A woken job of a scope that will not start now (expired, or its type paused) gives back the slot it
-- held for itself (fair.lua), so maintenance's next look at its line wakes the next job instead.
local function give_back(id, limit, fields)
  local scope, turn = scope_of(limit, fields)
  if scope and turn then redis.pcall('ZREM', limit[6] .. scope, id) end
end

for n = 1, tonumber(ARGV[2]) do
  local list, sched, wip, high, low, index = unpack(KEYS, 6 * n + 1, 6 * n + 6)
  local id = take(n, list, high, low)
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
      local limit = limit_of(name)
      if expires and attempt == 0 and now >= expires then
        give_back(id, limit, fields)
        expire(n, id, key, fields)
      elseif held(id, limit) then
        give_back(id, limit, fields)  -- a parked job takes no slot or rate
        park(id, key, limit, n)
        parked = parked + 1
      else
        local scope, turn = scope_of(limit, fields)
        if limit and limit[7] and not scope then limit = nil end  -- queued before its type had a key
        local checked, wait = true, nil
        if limit then checked, wait = pcall(blocked, limit, scope, id, turn, index) end
        if not checked then put_back(id, wait) end  -- a slot, rate or line key of the wrong type
        if wait and scope then
          local lined, err = pcall(fair().park, index, scope, id, key, turn, now + wait)
          if not lined then put_back(id, err) end  -- its line or the index is of the wrong type
          deferred = deferred + 1
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
            redis.pcall('ZADD', scope and limit[6] .. scope or KEYS[limit[4]], now, token)
          end
          if turn then redis.pcall('HDEL', key, 'dj_line', 'dj_turn') end  -- its turn came
          return {finished, expired, n, id, token, fields}
        end
      end
      -- a batch of parked, deferred or expired jobs ends this script; the caller claims again, behind them
      if parked >= 100 or deferred + (expired and #expired / 3 or 0) >= 20 then
        return {finished, expired, 'deferred'}
      end
    else
      -- its hash is gone (evicted, deleted): nothing to run, but never dropped without a trace
      redis.pcall('ZADD', vanished, now, ARGV[13 + n] .. '\n' .. id)
    end
    id = take(n, list, high, low)
  end
end
return {finished, expired}
