-- Finish the previous job (done: its hash, wip set, token and result; scope: its key's, if it has
-- limit_key, and done_queue: its queue, where its key's next job goes), then claim the next one from the queues (queue(n): its keys, name, and
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
-- A popped job meets the gates (lua/gates/, in the order of scripts.GATES), then gets its lease. A plain
-- job (no expiry, no limits) meets none: every function and table a script makes costs on each call
-- (a function the more, the more locals it captures), so the gates, and the table of the job they look
-- at, are made only by a claim that pops a job with an expiry or limits, and the lease is inline.
-- Up to want jobs are leased, in the order as many claims one after another would take them; a batch
-- ends early after a job of a scope (limit_key). Returns {finished, expired, then per leased job: queue
-- number, id, token, fields} (fields as they were before the claim), or {finished, expired,
-- 'deferred'} when none was leased and a batch of jobs the gates stopped ended the script; finished
-- counts the completions that found their lease; expired is {queue number, id, fields, ...} of each
-- job it dropped because it expired, or false (nil to the caller) when none did.
${NOW}
${FAIR_MADE}
local finished = 0
-- done first (the one completion that may have a scope), then each of also (plain ones, of a batch)
for i = done and 0 or 1, also_count do
  local d = i == 0 and done or also(i)
  if redis.call('ZREM', leases, d.token) == 1 then
    finished = finished + 1
    redis.call('ZREM', d.wip, d.token)
    redis.call('HSET', d.hash, '${F_STATUS}', '${FINISHED}', '${F_ENDED_AT}', stamp)
    if d.result ~= '' then redis.call('HSET', d.hash, '${F_RESULT}', d.result) end
    redis.call('EXPIRE', d.hash, finished_ttl)
    if i == 0 and scope then  -- a broken key of its scope must not undo a completion: maintenance wakes
      pcall(fair().next_turn, leases, lost, scope, cjson.decode(scope.limits), done_queue, done.token)
    end
  end
end
local limited_by = limits ~= '{}' and cjson.decode(limits)  -- the plain path: nothing to decode
local expired = false  -- a table once a job expired: the plain path builds none

-- The jobs leased so far, four items each (queue number, id, token, fields), and the reply that
-- carries them.
local got, batch_size = {}, 4 * tonumber(want)
local function reply(leased)
  local out = {finished, expired}
  for i = 1, #leased do out[i + 2] = leased[i] end
  return out
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

-- The first gate that stops a job, and what it did (nil: every gate let it pass); and how many jobs the
-- gates stopped, by what they did to them. Made with the gates.
local stopped, stops

for n = 1, queue_count do
  local q = queue(n)
  local id = take(q)
  while id do
    local key = prefix .. id
    -- the hash, or a table with err when it is not a hash (or the id is one django_jobs never makes:
    -- the id rule, JOB_ID; never run, never handed to a worker, whose reports it could garble, and
    -- quarantined from its raw bytes by the dying scan)
    local sound = #id <= 64 and string.match(id, '^[A-Za-z0-9_%-]+$$')
    local fields = sound and redis.pcall('HGETALL', key) or {err = 'id'}
    if fields.err then
      -- not a hash at all: a poison entry, dead-lettered from its raw bytes
      local added = redis.pcall('ZADD', dying, now, id)
      if type(added) == 'table' and added.err then put_back(id, added) end
    elseif #fields > 0 then
      -- started: an attempt of it began once (its first start is set)
      local attempt, name, workers, expires, started = 0, '', nil, nil, false
      for i = 1, #fields, 2 do
        if fields[i] == '${F_ATTEMPT}' then attempt = tonumber(fields[i + 1]) or 0
        elseif fields[i] == '${F_DESCRIPTION}' then name = fields[i + 1]
        elseif fields[i] == '${F_WORKERS}' then workers = fields[i + 1]
        elseif fields[i] == '${F_EXPIRES}' then expires = tonumber(fields[i + 1])
        elseif fields[i] == '${F_FIRST_STARTED}' then started = true end
      end
      -- its limits by its stored name: ours is the bare name, RQ's is the call 'name(args...)'
      local limit = limited_by and (limited_by[name] or limited_by[string.match(name, '^[^(]*')])
      local job, checked, stop = nil, true, nil
      if expires or limit then
        if not stopped then
          stops = {${STOP_DROPPED} = 0, ${STOP_PARKED} = 0, ${STOP_DEFERRED} = 0}

          -- A woken job of a scope that will not start now (expired, or its type paused) gives back the
          -- slot it held for itself (fair.lua), so maintenance's next look at its line wakes the next job.
          local function give_back(job)
            if job.scope and job.turn then redis.pcall('ZREM', job.slots, job.id) end
          end

          -- Hold a job that may not start for 'wait' seconds: a job of a scope in its line, looked at
          -- again by then; any other in its queue's scheduled set (spread out a little, so a batch does
          -- not come back at one instant). No attempt is spent.
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
          stopped = function(job)
            for i = 1, #gates do
              local stop = gates[i](job)
              if stop then return stop end
            end
          end
        end
        -- The job as the gates see it: n and queue (where it was popped), id, key (its hash), fields,
        -- attempt, expires, started, limit (its limits entry, or nil), pause (the entry, while its type
        -- is paused), and for a job of a scope (limit_key) scope ('<canonical name>\n<key value>') and
        -- turn (set while it waits in, or was woken from, its line); slots: the slots its attempt takes
        -- (its scope's or its type's), or nil.
        job = {n = n, queue = q, id = id, key = key, fields = fields, attempt = attempt, expires = expires,
               started = started, pause = limit and limit.paused_field and limit}
        local value, turn  -- of a job of a scope; no value: queued before its type had a key, no limit holds it
        if limit and limit.scope then value, turn = fair().key_of(fields) end
        if value then
          job.scope, job.turn = limit.scope .. value, turn
          job.slots, job.limit = limit.slots_prefix .. limit.scope .. value, limit
        elseif limit and not limit.scope then
          job.slots, job.limit = limit.slots > 0 and limited(limit.slots) or nil, limit
        end
        checked, stop = pcall(stopped, job)
        if not checked then put_back(id, stop) end  -- a key a gate writes is of the wrong type
      end
      if not stop then
        -- the lease: it starts now, and takes its slot
        local token = id .. ':' .. nonce
        local added = redis.pcall('ZADD', leases, now + tonumber(lease_seconds), token)
        if type(added) == 'table' and added.err then put_back(id, added) end
        -- every attempt's worker, newest last (the oldest dropped past 4 kB), and the first start
        workers = workers and string.sub(workers .. '\n' .. worker, -4096) or worker
        -- one HSET: on its first start it is also the first start (a key written again: harmless); a job
        -- handed back or snoozed, its attempt given back, keeps the first start it had
        redis.call('HSET', key, '${F_STATUS}', '${STARTED}', '${F_STARTED_AT}', stamp, '${F_WORKER_NAME}', worker,
                   '${F_LAST_HEARTBEAT}', stamp, '${F_ATTEMPT}', math.floor(attempt) + 1, '${F_WORKERS}', workers,
                   started and '${F_STARTED_AT}' or '${F_FIRST_STARTED}', stamp)
        redis.pcall('ZADD', q.wip, '+inf', token)  -- RQ's registry: for its tools only
        if job and job.slots and job.limit.concurrency > 0 then redis.pcall('ZADD', job.slots, now, token) end
        if job and job.turn then redis.pcall('HDEL', key, '${F_LINE}', '${F_TURN}') end  -- its turn came
        local g = #got
        got[g + 1], got[g + 2], got[g + 3], got[g + 4] = n, id, token, fields
        -- a batch ends at its size, or after a job of a scope (so a completion carries one scope)
        if g + 4 >= batch_size or (job and job.scope) then return reply(got) end
      else
        stops[stop] = stops[stop] + 1
        if stop == '${STOP_DROPPED}' then
          expired = expired or {}
          local e = #expired
          expired[e + 1], expired[e + 2], expired[e + 3] = n, id, fields
        end
        -- a batch of stopped jobs ends this script; the caller claims again, behind them
        if stops.${STOP_PARKED} >= 100 or stops.${STOP_DEFERRED} + stops.${STOP_DROPPED} >= 20 then
          return #got > 0 and reply(got) or {finished, expired, 'deferred'}
        end
      end
    else
      -- its hash is gone (evicted, deleted): nothing to run, but never dropped without a trace
      redis.pcall('ZADD', vanished, now, q.name .. '\n' .. id)
    end
    id = take(q)
  end
end
return reply(got)
