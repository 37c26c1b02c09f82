"""The Redis layout, and the Lua scripts that move a job between states in one atomic step.

Jobs live where RQ keeps them, so ``rq info`` and the django-rq views read them:

* ``rq:job:<id>``        the job hash (``data`` is JSON shaped like RQ's JSONSerializer output);
* ``rq:queue:<q>``       the FIFO list of ready job ids; ``rq:queues`` the set of queue keys;
* ``rq:scheduled:<q>``   due time -> job id, for retries and delayed jobs;
* ``rq:wip:<q>``         RQ's started registry, scored ``+inf`` so RQ's own cleanup never reaps our jobs.

django_jobs adds what RQ lacks:

* ``djjobs:leases``      ``<id>:<token>`` scored by lease expiry (Redis server time). The token
  fences a stale attempt: once its lease is gone, its completion is refused.
* ``djjobs:lost``        attempts whose worker died; the supervisor decides retry or dead letter.
  Scored by when they are due to be looked at: an item a pass could not settle goes behind the others.
* ``djjobs:dying``       jobs being dead-lettered; they leave only once the database row exists.
* ``djjobs:vanished``    ``<queue>\n<id>`` of ids popped from a queue whose hash was gone (evicted,
  deleted), waiting for a maintenance duty to write their ``vanished`` dead letter.
* ``djjobs:wake:<q>``    wake-up tokens, so idle workers block on BLPOP without popping real jobs.

Every transition is one script, so a process killed at any instant leaves each job in exactly one
of these structures, never in none.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis import Redis
from redis.commands.core import Script

JOB_PREFIX = "rq:job:"
QUEUES_SET = "rq:queues"
LEASES = "djjobs:leases"
LOST = "djjobs:lost"
DYING = "djjobs:dying"
VANISHED = "djjobs:vanished"


#: What a job id may be: RQ's own rule (letters, digits, ``_`` and ``-``; rq.job.JOB_ID_PATTERN), at
#: most 64 characters, the width of every job id column. Every id django_jobs makes is a uuid4 hex.
JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_job_id(value: str) -> bool:
    return JOB_ID.fullmatch(value) is not None


def surrogate_id(raw: bytes) -> str:
    """A valid, stable id standing in for one that breaks :data:`JOB_ID`: the same raw id always gets
    the same surrogate, so its dead letter is written once however often it is found."""
    return "unreadable-" + hashlib.sha256(raw).hexdigest()[:32]


def to_text(raw: bytes) -> str:
    """Bytes from Redis as text that never raises; :func:`to_bytes` gives the same bytes back."""
    return raw.decode("utf-8", "surrogateescape")


def to_bytes(text: str) -> bytes:
    """The bytes a :func:`to_text` string came from (other lone surrogates are kept as they are)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def queue_key(queue: str) -> str:
    return f"rq:queue:{queue}"


def scheduled_key(queue: str) -> str:
    return f"rq:scheduled:{queue}"


def wip_key(queue: str) -> str:
    return f"rq:wip:{queue}"


def wake_key(queue: str) -> str:
    return f"djjobs:wake:{queue}"


def job_key(job_id: str) -> str:
    return JOB_PREFIX + job_id


def rq_timestamp(when: dt.datetime) -> str:
    """RQ's own timestamp format, so its tools parse our fields."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def split_token(token: str) -> str:
    """The job id inside a lease token ``<id>:<nonce>``."""
    return token.rpartition(":")[0]


_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# ARGV[1]: JSON list of [id, queue, due (0 = now), [field, value, ...], unique key or '', debounce seconds];
# ARGV[2]: wake list cap; ARGV[3]: seconds a unique key's marker (and a replaced job's tombstone) lives.
# Returns the ids not pushed: already in Redis (a second push of an id is a no-op), a duplicate of a
# queued or running job with the same unique key, or a debounced job that a newer one already replaced.
# A unique key is one namespace for every job (the key names the job if it must), so a job queued under
# an alias and one under its current name hold the same key.
_PUSH = (
    _NOW
    + """
local jobs = cjson.decode(ARGV[1])
local seen = {}
local queues = {}
local pending = {queued = true, started = true, scheduled = true}

-- {status, origin, created_at} of the job holding a unique key; {} if its hash is gone or not a hash.
local function holder_fields(holder)
  local got = redis.pcall('HMGET', 'rq:job:' .. holder, 'status', 'origin', 'created_at')
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
  redis.call('HSET', key, 'status', 'canceled', 'dj_replaced_by', by)
  redis.call('EXPIRE', key, ARGV[3])
end

for _, j in ipairs(jobs) do
  local id, queue, due, unique, debounce = j[1], j[2], tonumber(j[3]), j[5], tonumber(j[6])
  local key = 'rq:job:' .. id
  local skip = redis.call('EXISTS', key) == 1
  local replaced_by = nil
  if not skip and unique ~= '' then
    local marker = 'djjobs:unique:' .. unique
    local holder = redis.call('GET', marker)
    local held = holder and holder_fields(holder) or {}
    if holder and debounce > 0 then
      -- debounce: the newest enqueue replaces one that is still waiting out its window
      if (held[3] or '') > created(j[4]) then
        replaced_by = holder  -- this one is older: it arrives after the job that replaced it
      elseif held[1] == 'scheduled' then
        -- in its own queue's scheduled set: a deploy may have moved the job to another queue
        if redis.call('ZREM', 'rq:scheduled:' .. (held[2] or queue), holder) == 1 then
          tombstone('rq:job:' .. holder, id, nil)
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
      redis.call('ZADD', 'rq:scheduled:' .. queue, due, id)
      redis.call('HSET', key, unpack(j[4]))
      redis.call('HSET', key, 'status', 'scheduled')
    else
      redis.call('RPUSH', 'rq:queue:' .. queue, id)
      redis.call('HSET', key, unpack(j[4]))
      queues[queue] = (queues[queue] or 0) + 1
    end
  end
end
for q, n in pairs(queues) do
  redis.call('SADD', 'rq:queues', 'rq:queue:' .. q)
  local tokens = {}
  for i = 1, math.min(n, tonumber(ARGV[2])) do tokens[i] = '1' end
  redis.call('RPUSH', 'djjobs:wake:' .. q, unpack(tokens))
  redis.call('LTRIM', 'djjobs:wake:' .. q, 0, tonumber(ARGV[2]) - 1)
end
return seen
"""
)

# Finish the previous job (ARGV[1] token, ARGV[2] its queue, ARGV[3] ended_at, ARGV[4] finished ttl),
# then claim the next one from the queues KEYS (in priority order).
# ARGV[5] worker name, ARGV[6] lease seconds, ARGV[7] started_at, ARGV[8] nonce,
# ARGV[9] JSON {job name or alias: [concurrency, rate count, rate period, canonical name]} (slots and
# rate windows are keyed by the canonical name, so aliases share them), ARGV[10] seconds a limited job waits.
# The attempt counter goes up at claim time, so an attempt whose worker dies still counts.
# Nothing after the LPOP may raise: a script error would leave the popped id nowhere.
# Returns {finished_ok, queue, id, token, fields} (fields as they were before the claim) or {finished_ok}.
_COMPLETE_AND_CLAIM = (
    _NOW
    + """
local finished = 0
if ARGV[1] ~= '' then
  if redis.call('ZREM', 'djjobs:leases', ARGV[1]) == 1 then
    finished = 1
    local id = string.match(ARGV[1], '^(.*):[^:]*$')
    redis.call('ZREM', 'rq:wip:' .. ARGV[2], ARGV[1])
    redis.call('HSET', 'rq:job:' .. id, 'status', 'finished', 'ended_at', ARGV[3])
    redis.call('EXPIRE', 'rq:job:' .. id, ARGV[4])
  end
end
local limits = cjson.decode(ARGV[9])
local backoff = tonumber(ARGV[10])
local deferred = 0

-- The limits of a job by its stored name: ours is the bare name, RQ's is the call 'name(args...)'.
local function limit_of(name)
  return limits[name] or limits[string.match(name, '^[^(]*')]
end

-- A job over its type's concurrency or rate limit waits in the scheduled set; no attempt is spent.
local function blocked(name)
  local limit = limit_of(name)
  if not limit then return nil end
  if limit[1] > 0 then
    local slots = 'djjobs:slots:' .. limit[4]
    local live = 0
    for _, member in ipairs(redis.call('ZRANGE', slots, 0, -1)) do
      if redis.call('ZSCORE', 'djjobs:leases', member) then live = live + 1
      else redis.call('ZREM', slots, member) end  -- its lease is gone: the slot is free again
    end
    if live >= limit[1] then return backoff end
  end
  if limit[2] > 0 then
    local window = math.floor(now / limit[3])
    local counter = 'djjobs:rate:' .. limit[4] .. ':' .. window
    local started = redis.call('INCR', counter)
    if started == 1 then redis.call('EXPIRE', counter, math.ceil(limit[3]) + 1) end
    if started > limit[2] then return (window + 1) * limit[3] - now end
  end
  return nil
end

-- A write after the LPOP failed (a structure key of the wrong type): put the id back at the head
-- of its queue and fail the claim, so the job is not lost; maintenance moves the broken key aside.
local function put_back(queue, id, err)
  redis.call('LPUSH', 'rq:queue:' .. queue, id)
  error(err)
end

local function must(queue, id, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then put_back(queue, id, reply) end
  return reply
end

for _, queue in ipairs(KEYS) do
  local id = redis.call('LPOP', 'rq:queue:' .. queue)
  while id do
    local key = 'rq:job:' .. id
    local fields = {}
    if #id > 64 or not string.match(id, '^[A-Za-z0-9_%-]+$') then
      -- an id django_jobs never makes (the id rule: JOB_ID): never run, never handed to a worker
      -- (whose reports it could garble); quarantined from its raw bytes by the dying scan
      fields = {err = 'id'}
    else
      fields = redis.pcall('HGETALL', key)
    end
    if fields.err then
      -- not a hash at all: a poison entry, dead-lettered from its raw bytes
      must(queue, id, 'ZADD', 'djjobs:dying', now, id)
    elseif #fields > 0 then
      local attempt, name = 0, ''
      for i = 1, #fields, 2 do
        if fields[i] == 'dj_attempt' then attempt = tonumber(fields[i + 1]) or 0
        elseif fields[i] == 'description' then name = fields[i + 1] end
      end
      local checked, wait = pcall(blocked, name)
      if not checked then put_back(queue, id, wait) end  -- a slot or rate key of the wrong type
      if wait then
        must(queue, id, 'ZADD', 'rq:scheduled:' .. queue, now + wait + deferred * 0.01, id)
        redis.call('HSET', key, 'status', 'scheduled')
        deferred = deferred + 1
        if deferred >= 20 then return {finished, 'deferred'} end
      else
        local token = id .. ':' .. ARGV[8]
        must(queue, id, 'ZADD', 'djjobs:leases', now + tonumber(ARGV[6]), token)
        redis.call('HSET', key, 'status', 'started', 'started_at', ARGV[7], 'worker_name', ARGV[5],
                   'last_heartbeat', ARGV[7], 'dj_attempt', math.floor(attempt) + 1)
        redis.pcall('ZADD', 'rq:wip:' .. queue, '+inf', token)  -- RQ's registry: for its tools only
        local limit = limit_of(name)
        if limit and limit[1] > 0 then
          redis.pcall('ZADD', 'djjobs:slots:' .. limit[4], now, token)
        end
        return {finished, queue, id, token, fields}
      end
    else
      -- its hash is gone (evicted, deleted): nothing to run, but never dropped without a trace
      redis.pcall('ZADD', 'djjobs:vanished', now, queue .. '\\n' .. id)
    end
    id = redis.call('LPOP', 'rq:queue:' .. queue)
  end
end
return {finished}
"""
)

# Fenced failure of one attempt. KEYS[1]: where its token is (LEASES, or LOST once reaped).
# ARGV: token, queue, delay seconds (retry; 0 = the head of the queue now) or -1 (dead), then
# field/value pairs to write on the job hash. A dead job moves to DYING until its row is written.
_FAIL = (
    _NOW
    + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$')
local key = 'rq:job:' .. id
redis.call('ZREM', 'rq:wip:' .. ARGV[2], ARGV[1])
if #ARGV > 3 then redis.call('HSET', key, unpack(ARGV, 4)) end
if tonumber(ARGV[3]) == 0 then
  -- no backoff (its worker died): straight back to the head of the queue, not behind a backlog
  redis.call('HSET', key, 'status', 'queued')
  redis.call('LPUSH', 'rq:queue:' .. ARGV[2], id)
  redis.call('RPUSH', 'djjobs:wake:' .. ARGV[2], 1)
elseif tonumber(ARGV[3]) > 0 then
  redis.call('HSET', key, 'status', 'scheduled')
  redis.call('ZADD', 'rq:scheduled:' .. ARGV[2], now + tonumber(ARGV[3]), id)
else
  redis.call('HSET', key, 'status', 'failed')
  redis.call('ZADD', 'djjobs:dying', now, id)
end
return 1
"""
)

# Hand a running job back untouched (shutdown): no attempt is spent. ARGV: token, queue.
_RELEASE = """
if redis.call('ZREM', 'djjobs:leases', ARGV[1]) == 0 then return 0 end
local id = string.match(ARGV[1], '^(.*):[^:]*$')
redis.call('ZREM', 'rq:wip:' .. ARGV[2], ARGV[1])
redis.call('LPUSH', 'rq:queue:' .. ARGV[2], id)
local attempt = tonumber(redis.call('HGET', 'rq:job:' .. id, 'dj_attempt')) or 1
redis.call('HSET', 'rq:job:' .. id, 'status', 'queued', 'dj_attempt', math.max(attempt - 1, 0))
redis.call('RPUSH', 'djjobs:wake:' .. ARGV[2], 1)
return 1
"""

# Extend the leases of running jobs. ARGV[1] lease seconds, ARGV[2..] tokens. XX: never resurrect.
# Returns the tokens whose lease is gone: another runjobs has taken those jobs back.
_HEARTBEAT = (
    _NOW
    + """
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZADD', 'djjobs:leases', 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i]) == 0
     and not redis.call('ZSCORE', 'djjobs:leases', ARGV[i]) then
    table.insert(gone, ARGV[i])
  end
end
return gone
"""
)

# Move expired leases to LOST (worker died), and due scheduled jobs to their queues; a scheduled id
# whose hash is gone or is not a hash moves to DYING, so it cannot stop promotion for everyone.
# KEYS: queue names. ARGV[1]: batch size, ARGV[2]: enqueued_at of promoted jobs.
# Returns {lost tokens moved, jobs promoted}.
_MAINTAIN = (
    _NOW
    + """
local lost = 0
for _, token in ipairs(redis.call('ZRANGEBYSCORE', 'djjobs:leases', '-inf', now, 'LIMIT', 0, ARGV[1])) do
  redis.call('ZREM', 'djjobs:leases', token)
  redis.call('ZADD', 'djjobs:lost', now, token)
  lost = lost + 1
end
local promoted = 0
for _, queue in ipairs(KEYS) do
  local sched = 'rq:scheduled:' .. queue
  local due = redis.call('ZRANGEBYSCORE', sched, '-inf', now, 'LIMIT', 0, ARGV[1])
  if #due > 0 then
    local moved = 0
    for _, id in ipairs(due) do
      local key = 'rq:job:' .. id
      if redis.call('TYPE', key)['ok'] == 'hash' then
        redis.call('HSET', key, 'status', 'queued', 'enqueued_at', ARGV[2])
        redis.call('RPUSH', 'rq:queue:' .. queue, id)
        moved = moved + 1
      else
        -- its hash vanished, or the key is not a hash: dead-lettered from what is left, never queued
        redis.call('ZADD', 'djjobs:dying', now, id)
      end
    end
    redis.call('ZREM', sched, unpack(due))
    if moved > 0 then
      redis.call('SADD', 'rq:queues', 'rq:queue:' .. queue)
      for i = 1, math.min(moved, 64) do redis.call('RPUSH', 'djjobs:wake:' .. queue, 1) end
      redis.call('LTRIM', 'djjobs:wake:' .. queue, 0, 63)
    end
    promoted = promoted + moved
  end
end
return {lost, promoted}
"""
)

# A dead letter's row exists: forget the item. KEYS[1]: the set it is in (DYING, or LOST when a
# lost attempt was quarantined). ARGV: member, job id, ttl for the job hash, its queue or ''.
_BURIED = """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  if redis.call('EXISTS', 'rq:job:' .. ARGV[2]) == 1 then
    redis.call('EXPIRE', 'rq:job:' .. ARGV[2], ARGV[3])
  end
  if ARGV[4] ~= '' then redis.call('ZREM', 'rq:wip:' .. ARGV[4], ARGV[1]) end
end
return 1
"""

# The members of KEYS[1] scored at most now - ARGV[1] seconds, oldest first, at most ARGV[2].
_DUE = (
    _NOW
    + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
"""
)

# Move one member of KEYS[1] behind the others: scored now + ARGV[2] seconds. XX: never resurrect one
# that was settled meanwhile.
_DEFER = (
    _NOW
    + """
return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
"""
)


class Pushable(Protocol):
    """What the push script needs of a job (``enqueue.Envelope`` provides it)."""

    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def due(self) -> float: ...
    @property
    def unique_key(self) -> str: ...
    @property
    def debounce(self) -> float: ...
    def fields(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class VanishedId:
    """A job id popped from ``queue`` after its hash was gone: only the id and queue are known."""

    member: bytes  # as stored in VANISHED, to remove it once its dead letter is written
    queue: str
    id: str


@dataclass(frozen=True)
class Claimed:
    """A job this worker now holds a lease on."""

    queue: str
    id: str
    token: str
    fields: dict[str, bytes]

    @property
    def attempt(self) -> int:
        """This attempt's number, 1-based (the claim already counted it)."""
        return int_field(self.fields, "dj_attempt", 1)


def int_field(fields: dict[str, bytes], name: str, default: int) -> int:
    """A numeric job-hash field, tolerating garbage (a corrupt hash must not crash the worker)."""
    try:
        return int(float(fields[name]))
    except (KeyError, ValueError, TypeError, OverflowError):
        return default


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any]) -> dict[str, bytes]:
    return {
        k.decode() if isinstance(k, bytes) else str(k): v for k, v in zip(flat[::2], flat[1::2], strict=False)
    }


def _flat(fields: dict[str, Any]) -> list[Any]:
    return [item for pair in fields.items() for item in pair]


class Store:
    """The scripts bound to one Redis connection; :meth:`of` shares one per connection."""

    WAKE_CAP = 64

    def __init__(self, connection: Redis) -> None:
        self.connection = connection
        register = connection.register_script
        self._push: Script = register(_PUSH)
        self._complete_and_claim: Script = register(_COMPLETE_AND_CLAIM)
        self._fail: Script = register(_FAIL)
        self._release: Script = register(_RELEASE)
        self._heartbeat: Script = register(_HEARTBEAT)
        self._maintain: Script = register(_MAINTAIN)
        self._buried: Script = register(_BURIED)
        self._due: Script = register(_DUE)
        self._defer: Script = register(_DEFER)

    UNIQUE_TTL = 7 * 24 * 3600

    @classmethod
    def of(cls, connection: Redis) -> Store:
        """The store of ``connection``, built once: registering the scripts hashes their text."""
        store = _stores.get(connection)
        if store is None:
            store = _stores[connection] = cls(connection)
        return store

    def push(self, jobs: Iterable[Pushable], chunk: int = 500) -> set[str]:
        """Push jobs in one round trip; returns the ids not pushed (already there, or unique duplicates)."""
        batch = [[j.id, j.queue, j.due, _flat(j.fields()), j.unique_key, j.debounce] for j in jobs]
        seen: set[str] = set()
        if not batch:
            return seen
        chunks = [json.dumps(batch[start : start + chunk]) for start in range(0, len(batch), chunk)]
        if len(chunks) == 1:  # the common case: one EVALSHA, no pipeline (which would add SCRIPT EXISTS)
            results = [self._push(args=[chunks[0], self.WAKE_CAP, self.UNIQUE_TTL])]
        else:
            with self.connection.pipeline(transaction=False) as pipe:
                for data in chunks:
                    self._push(args=[data, self.WAKE_CAP, self.UNIQUE_TTL], client=pipe)
                results = pipe.execute()
        for result in results:
            seen.update(_text(x) for x in result)
        return seen

    def complete_and_claim(
        self,
        queues: Sequence[str],
        *,
        finished: tuple[str, str] | None,
        worker_name: str,
        lease_seconds: float,
        nonce: str,
        finished_ttl: int,
        limits: str = "{}",
        limit_wait: float = 0.5,
    ) -> tuple[bool, Claimed | None]:
        """Finish ``(token, queue)`` if given, then claim the next job, in one round trip.

        ``limits`` is the JSON from :func:`limits_json`; a job over its limit is deferred, not claimed.
        """
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        token, done_queue = finished or ("", "")
        args: list[str | float] = [
            token,
            done_queue,
            stamp,
            finished_ttl,
            worker_name,
            lease_seconds,
            stamp,
            nonce,
            limits,
            limit_wait,
        ]
        reply = self._complete_and_claim(keys=list(queues), args=args)
        ok = bool(reply[0])
        while len(reply) == 2:  # it deferred a batch of limited jobs: look behind them
            reply = self._complete_and_claim(keys=list(queues), args=["", "", *args[2:]])
        if len(reply) == 1:
            return ok, None
        queue, job_id, token_b, flat = reply[1:]
        fields = _pairs(flat)
        fields["dj_attempt"] = str(int_field(fields, "dj_attempt", 0) + 1).encode()  # as the script counted
        return ok, Claimed(queue.decode(), job_id.decode(), token_b.decode(), fields)

    def fail(
        self, token: str, queue: str, *, delay: float | None, fields: dict[str, Any], lost: bool = False
    ) -> bool:
        """Record a failed attempt: retry after ``delay`` seconds (0: at the head of the queue now),
        or (``None``) start dead-lettering. ``lost``: the reaper already moved its lease to LOST."""
        source = LOST if lost else LEASES
        # A message can hold lone surrogates (an exception quoting bad input): kept, not a crash.
        values = [to_bytes(v) if isinstance(v, str) else v for v in _flat(fields)]
        return bool(self._fail(keys=[source], args=[token, queue, -1 if delay is None else delay, *values]))

    def release(self, token: str, queue: str) -> bool:
        """Put a running job back at the head of its queue without spending an attempt."""
        return bool(self._release(args=[token, queue]))

    def heartbeat(self, tokens: Sequence[str], lease_seconds: float) -> set[str]:
        """Extend these leases; returns the tokens that no longer hold one."""
        if not tokens:
            return set()
        return {_text(t) for t in self._heartbeat(args=[lease_seconds, *tokens])}

    def maintain(self, queues: Sequence[str], batch: int = 500) -> tuple[int, int]:
        """Reap expired leases into LOST and promote due scheduled jobs; returns both counts."""
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))  # RQ's meaning: when the job was put on its queue
        lost, promoted = self._maintain(keys=list(queues), args=[batch, stamp])
        return int(lost), int(promoted)

    def lost_tokens(self, limit: int = 100) -> list[bytes]:
        """Lost attempts due to be settled, as raw bytes: whatever was planted, the scan never fails."""
        return list(self._due(keys=[LOST], args=[0, limit]))

    def dying(self, older_than: float, limit: int = 100) -> list[bytes]:
        """Jobs stuck between "dead" and "row written" for longer than ``older_than`` seconds (raw ids)."""
        return list(self._due(keys=[DYING], args=[older_than, limit]))

    def defer(self, key: str, member: bytes, seconds: float) -> None:
        """Put one member of LOST or DYING behind the others, so a scan's head always moves on."""
        self._defer(keys=[key], args=[member, seconds])

    def vanished(self, limit: int = 100) -> list[VanishedId]:
        """Ids the claim found without a hash, oldest first."""
        found = []
        members: list[bytes] = self.connection.zrange(VANISHED, 0, limit - 1)  # type: ignore[assignment]
        for member in members:
            queue, _, job_id = member.decode(errors="replace").partition("\n")
            found.append(VanishedId(member, queue, job_id))
        return found

    def forget_vanished(self, item: VanishedId) -> bool:
        """Drop an id whose dead letter exists; False if another runjobs already did."""
        return bool(self.connection.zrem(VANISHED, item.member))

    def buried(self, job_id: str, ttl: int) -> None:
        self.settled(DYING, to_bytes(job_id), to_bytes(job_id), ttl)

    def settled(self, key: str, member: bytes, job_id: bytes, ttl: int, queue: str = "") -> None:
        """Drop a member of ``key`` whose dead letter is written; its job hash expires after ``ttl``."""
        self._buried(keys=[key], args=[member, job_id, ttl, queue])

    def job_fields(self, job_id: str | bytes) -> dict[str, bytes]:
        """The job hash; field names that are not UTF-8 come back as :func:`to_text` strings."""
        key = JOB_PREFIX.encode() + job_id if isinstance(job_id, bytes) else job_key(job_id)
        raw: dict[bytes, bytes] = self.connection.hgetall(key)  # type: ignore[assignment]
        return {to_text(k): v for k, v in raw.items()}

    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds (in Redis time) until the first scheduled job of these queues is due; None if none."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            for queue in queues:
                pipe.zrange(scheduled_key(queue), 0, 0, withscores=True)
            (now_s, now_us), *firsts = pipe.execute()
        dues = [float(first[0][1]) for first in firsts if first]
        return min(dues) - (now_s + now_us / 1e6) if dues else None


_stores: weakref.WeakKeyDictionary[Redis, Store] = weakref.WeakKeyDictionary()
