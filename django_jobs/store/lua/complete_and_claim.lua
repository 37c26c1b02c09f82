-- Finish the previous job (done: its hash, token and result; done_queue: its queue; scope: its key's,
-- if it has limit_key), then claim the next one from the queues (queue(n): its keys, name, and
-- whether its high set may hold jobs), in priority order. Names: the interface in scripts.py.
-- limits: JSON {job name or alias: {concurrency, rate, period (0: no such limit), rate_prefix, slots:
-- the number in limited() of its type's slots (0: none), and for a name with limit_key: slots_prefix
-- and scope, its scope's prefix '<canonical name>\n' (its limits hold per scope, see fair.lua); while
-- its type is paused: paused_field (in the paused hash), parked: the number in limited() of its first
-- parked list (one per queue, in order), canonical}} (slots, rate windows and parked lists are keyed
-- by the canonical name, so aliases share them). backoff: seconds a job over its type's limit waits;
-- recheck: seconds until maintenance looks at a line a job was parked in.
-- Exceptions to "every key in KEYS": the hash of a popped id (known only once popped), a rate counter
-- (its name holds the window, from Redis time), and a scope's slots, line and rate counters and the
-- hash of a job woken from a line (their names hold the job's key value, known once its hash is read,
-- or the woken id); all built from prefixes in ARGV or KEYS, on this server.
-- The attempt counter goes up at claim time, so an attempt whose worker dies still counts.
-- Per queue the high set's head goes first, then the list's, then the low set's (see ready.lua); a high
-- set the worker found empty ('0') is asked after the list, so a plain claim runs no extra command.
-- Nothing after the pop may raise unless it first puts the id back (put_back): a script error would
-- otherwise leave the popped id nowhere.
-- A popped job meets the gates (lua/gates/, in the order of scripts.GATES), then gets its lease.
-- Returns {finished_ok, expired, queue number, id, token, fields} (fields as they were before the
-- claim), {finished_ok, expired, 'deferred'} after a batch of jobs the gates stopped, or
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
    made = {live = live, park = park, next_turn = next_turn, key_of = key_of, before = before}
  end
  return made
end

local finished = 0
if done and redis.call('ZREM', leases, done.token) == 1 then
  finished = 1
  redis.call('ZREM', done_queue.wip, done.token)
  redis.call('HSET', done.hash, '${F_STATUS}', '${FINISHED}', '${F_ENDED_AT}', stamp)
  if done.result ~= '' then redis.call('HSET', done.hash, '${F_RESULT}', done.result) end
  redis.call('EXPIRE', done.hash, finished_ttl)
  if scope then  -- a broken key of its scope must not undo a completion: maintenance wakes instead
    pcall(fair().next_turn, leases, lost, scope, cjson.decode(scope.limits), done_queue, done.token)
  end
end
local limited_by = limits ~= '{}' and cjson.decode(limits)  -- the plain path: nothing to decode
local expired = false  -- a table once a job expired: the plain path builds none
-- How many jobs the gates stopped, by what they did to them.
local stops = {${STOP_DROPPED} = 0, ${STOP_PARKED} = 0, ${STOP_DEFERRED} = 0}

-- The limits of a job by its stored name: ours is the bare name, RQ's is the call 'name(args...)'.
local function limit_of(name)
  if not limited_by then return nil end
  return limited_by[name] or limited_by[string.match(name, '^[^(]*')]
end

-- Where the id in hand was popped from, and its score there (nil: the list), for put_back.
local source, score

-- The head of one of a queue's sorted sets (popped), or nil.
local function pop(set)
  local top = redis.call('ZPOPMIN', set)
  if top[1] then source, score = set, top[2] end
  return top[1]
end

-- The next ready id of queue q: the high set's head, else the list's, else the low set's. A high set
-- the worker last found empty is asked only once the list is empty.
local function take(q)
  local first = q.prioritized == '1'
  local id = first and pop(q.high)
  if id then return id end
  source, score = q.list, nil
  id = redis.call('LPOP', q.list)
  if id then return id end
  return (not first and pop(q.high)) or pop(q.low) or false
end

-- A write after the pop failed (a structure key of the wrong type): put the id back where it was,
-- at the head, and fail the claim, so the job is not lost; maintenance moves the broken key aside.
local function put_back(id, err)
  if score then redis.call('ZADD', source, score, id) else redis.call('LPUSH', source, id) end
  error(err)
end

-- A popped job as the gates see it: n and queue (where it was popped), id, key (its hash), fields (its
-- HGETALL), attempt, workers, expires, started (an attempt of it began once: its first start is set),
-- limit (its limits entry, or nil), pause (the entry, while its type is paused), and for a job of a
-- scope (limit_key) scope ('<canonical name>\n<key value>') and turn (set while it waits in, or was
-- woken from, its line); slots: the slots its attempt takes (its scope's or its type's), or nil.
local function job_of(n, q, id, key, fields)
  local job = {n = n, queue = q, id = id, key = key, fields = fields, attempt = 0}
  local name = ''
  for i = 1, #fields, 2 do
    if fields[i] == '${F_ATTEMPT}' then job.attempt = tonumber(fields[i + 1]) or 0
    elseif fields[i] == '${F_DESCRIPTION}' then name = fields[i + 1]
    elseif fields[i] == '${F_WORKERS}' then job.workers = fields[i + 1]
    elseif fields[i] == '${F_EXPIRES}' then job.expires = tonumber(fields[i + 1])
    elseif fields[i] == '${F_FIRST_STARTED}' then job.started = true end
  end
  local limit = limit_of(name)
  if not limit then return job end
  job.pause = limit.paused_field and limit
  if limit.scope then
    local value, turn = fair().key_of(fields)
    if not value then return job end  -- queued before its type had a key: no limit holds it
    job.scope, job.turn, job.slots = limit.scope .. value, turn, limit.slots_prefix .. limit.scope .. value
  elseif limit.slots > 0 then
    job.slots = limited(limit.slots)
  end
  job.limit = limit
  return job
end

-- What the gates share. A woken job of a scope that will not start now (expired, or its type paused)
-- gives back the slot it held for itself (fair.lua), so maintenance's next look at its line wakes
-- the next job instead.
local function give_back(job)
  if job.scope and job.turn then redis.pcall('ZREM', job.slots, job.id) end
end

-- Hold a job that may not start for 'wait' seconds: a job of a scope in its line, looked at again by
-- then; any other in its queue's scheduled set (spread out a little, so a batch does not come back at
-- one instant). No attempt is spent.
local function wait_out(job, wait)
  if job.scope then
    fair().park(job.queue, job.scope, job.id, job.key, job.turn, now + wait)
  else
    redis.call('ZADD', job.queue.scheduled, now + wait + stops.${STOP_DEFERRED} * 0.01, job.id)
    redis.call('HSET', job.key, '${F_STATUS}', '${SCHEDULED}')
  end
  return '${STOP_DEFERRED}'
end

${GATES}
-- The first gate that stops the job, and what it did; nil: every gate let it pass.
local function stopped(job)
  for i = 1, #gates do
    local stop = gates[i](job)
    if stop then return stop end
  end
end

-- Lease the job that passed every gate: it starts now, and takes its slot.
local function lease(job)
  local token = job.id .. ':' .. nonce
  redis.call('ZADD', leases, now + tonumber(lease_seconds), token)
  -- every attempt's worker, newest last (the oldest dropped past 4 kB), and the first start
  local workers = job.workers and string.sub(job.workers .. '\n' .. worker, -4096) or worker
  -- one HSET: on its first start it is also the first start (a key written again: harmless); a job
  -- handed back or snoozed, its attempt given back, keeps the first start it had
  redis.call('HSET', job.key, '${F_STATUS}', '${STARTED}', '${F_STARTED_AT}', stamp, '${F_WORKER_NAME}', worker,
             '${F_LAST_HEARTBEAT}', stamp, '${F_ATTEMPT}', math.floor(job.attempt) + 1, '${F_WORKERS}', workers,
             job.started and '${F_STARTED_AT}' or '${F_FIRST_STARTED}', stamp)
  redis.pcall('ZADD', job.queue.wip, '+inf', token)  -- RQ's registry: for its tools only
  if job.slots and job.limit.concurrency > 0 then redis.pcall('ZADD', job.slots, now, token) end
  if job.turn then redis.pcall('HDEL', job.key, '${F_LINE}', '${F_TURN}') end  -- its turn came
  return token
end

-- The hash of a popped id: its fields, or a table with err when it is not a hash (or the id is one
-- django_jobs never makes: the id rule, JOB_ID; never run, never handed to a worker, whose reports
-- it could garble, and quarantined from its raw bytes by the dying scan).
local function read(id, key)
  if #id > 64 or not string.match(id, '^[A-Za-z0-9_%-]+$$') then return {err = 'id'} end
  return redis.pcall('HGETALL', key)
end

for n = 1, queue_count do
  local q = queue(n)
  local id = take(q)
  while id do
    local key = prefix .. id
    local fields = read(id, key)
    if fields.err then
      -- not a hash at all: a poison entry, dead-lettered from its raw bytes
      local added = redis.pcall('ZADD', dying, now, id)
      if type(added) == 'table' and added.err then put_back(id, added) end
    elseif #fields > 0 then
      local job = job_of(n, q, id, key, fields)
      local checked, stop = pcall(stopped, job)
      if not checked then put_back(id, stop) end  -- a key a gate writes is of the wrong type
      if not stop then
        local leased, token = pcall(lease, job)
        if not leased then put_back(id, token) end
        return {finished, expired, n, id, token, fields}
      end
      stops[stop] = stops[stop] + 1
      if stop == '${STOP_DROPPED}' then
        expired = expired or {}
        local e = #expired
        expired[e + 1], expired[e + 2], expired[e + 3] = n, id, fields
      end
      -- a batch of stopped jobs ends this script; the caller claims again, behind them
      if stops.${STOP_PARKED} >= 100 or stops.${STOP_DEFERRED} + stops.${STOP_DROPPED} >= 20 then
        return {finished, expired, 'deferred'}
      end
    else
      -- its hash is gone (evicted, deleted): nothing to run, but never dropped without a trace
      redis.pcall('ZADD', vanished, now, q.name .. '\n' .. id)
    end
    id = take(q)
  end
end
return {finished, expired}
