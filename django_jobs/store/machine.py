"""The job state machine: one :class:`Store` per Redis connection, one method per named transition.

Every transition is one Lua script (``lua/<name>.lua``), so a process killed at any instant leaves
each job in exactly one of the structures of :mod:`.keys`, never in none. Every key a script
touches is passed in KEYS (the few exceptions, keys known only once the script reads them, are
documented in the script's header and live on the same server), and the statuses come from
:class:`.record.Status`, substituted into the script text when it loads.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import json
import math
import string
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, NamedTuple, Protocol

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import ResponseError

from django_jobs.store import keys
from django_jobs.store.record import (
    JobRecord,
    Status,
    int_field,
    rq_timestamp,
    split_token,
    text,
    to_bytes,
    to_text,
)

#: The scores of one priority in a queue's priority sets (``lua/ready.lua``): 201 bands of 2^44 stay
#: below 2^52, so every score is an exact integer in a double.
PRIORITY_BAND = 2**44
#: Seconds until maintenance looks at a line of parked jobs again, in case a wake-up was missed.
PARK_RECHECK = 1.0
#: Seconds a job woken from its line holds its slot for itself, waiting to be claimed (``lua/fair.lua``).
TURN_HOLD = 60.0


def _lua(name: str, **snippets: str) -> str:
    text = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
    return string.Template(text).substitute({s.name: s.value for s in Status}, BAND=PRIORITY_BAND, **snippets)


@functools.cache
def script_text(name: str) -> str:
    """The text of ``lua/<name>.lua`` with its snippets, the priority band and the statuses filled in.

    The files are :class:`string.Template` text: ``${NOW}`` (the Redis-time prologue), ``${READY}``
    (where a ready id goes), ``${FAIR}`` (limits per key: park, wake), ``${BAND}``, ``${QUEUED}``...
    and ``$$`` for a ``$``.
    """
    return _lua(name, NOW=_lua("now"), READY=_lua("ready"), FAIR=_lua("fair"))


def load(connection: Redis, name: str) -> Script:
    """The script ``name`` bound to ``connection``, registered once per connection."""
    scripts = _scripts.setdefault(connection, {})
    script = scripts.get(name)
    if script is None:
        script = scripts[name] = connection.register_script(script_text(name))
    return script


_scripts: weakref.WeakKeyDictionary[Redis, dict[str, Script]] = weakref.WeakKeyDictionary()


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
    @property
    def priority(self) -> int: ...
    def fields(self) -> dict[str, Any]: ...


class CancelResult(enum.StrEnum):
    """What a cancel did, for its caller to report."""

    CANCELLED = "cancelled"  # it was waiting (queued, scheduled, deferred by a limit): it never runs
    REQUESTED = "requested"  # it is running: its code may stop, or its supervisor kills it after a grace
    ALREADY_ENDED = "already_ended"  # finished, failed, dead-lettered or cancelled before: unchanged
    NOT_FOUND = "not_found"  # no such job in Redis (never pushed, or expired after it ended)


#: The cancel script's replies.
_CANCEL_REPLIES = {
    0: CancelResult.NOT_FOUND,
    1: CancelResult.CANCELLED,
    2: CancelResult.REQUESTED,
    3: CancelResult.ALREADY_ENDED,
}


#: Cancels of a job that a claim parks (or a resume releases) under it, before one gives up.
_CANCEL_TRIES = 10


class Settled(enum.IntEnum):
    """How a fenced end of an attempt (a failure, a hand-back) landed: the fail and release scripts' reply."""

    FENCED = 0  # the token held no lease: another attempt or a reaper owns the job now
    DONE = 1  # settled as asked
    CANCELLED = 2  # its cancel was requested (or asked for): cancelled instead, never run again


@dataclass(frozen=True)
class Beat:
    """What one heartbeat found: tokens whose lease was gone, and tokens whose job was asked to stop."""

    gone: set[str]
    cancelled: set[str]


@dataclass(frozen=True)
class Pause:
    """A queue (``kind`` "queue") or a job type ("job", by its current name) that is paused, as the
    paused hash records it: since when (Redis time), by whom and why."""

    kind: str
    name: str
    at: float | None  # Unix time; None if the record cannot be read (the pause holds all the same)
    by: str
    reason: str

    @classmethod
    def parse(cls, field: bytes, raw: bytes) -> Pause | None:
        """A pause from one field of the paused hash; None for a field that names no queue or job.
        Garbage in the value still pauses (the claim asks only whether the field exists)."""
        kind, _, name = to_text(field).partition(":")
        if kind not in PAUSE_KINDS or not name:
            return None
        try:
            record = json.loads(raw)
            at = float(record["at"])
            by, reason = str(record.get("by", "")), str(record.get("reason", ""))
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls(kind, name, None, "", "(unreadable pause record)")
        return cls(kind, name, at if math.isfinite(at) else None, by, reason)

    @property
    def since(self) -> dt.datetime | None:
        return dt.datetime.fromtimestamp(self.at, dt.UTC) if self.at is not None else None

    def seconds(self, now: float) -> float:
        """How long it has been paused at ``now`` (Unix time); 0 if its record cannot say."""
        return max(now - self.at, 0.0) if self.at is not None else 0.0


#: What can be paused: a queue, or a job type.
PAUSE_KINDS = ("queue", "job")


@dataclass(frozen=True)
class VanishedId:
    """A job id popped from ``queue`` after its hash was gone: only the id and queue are known."""

    member: bytes  # as stored in VANISHED, to remove it once its dead letter is written
    queue: str
    id: str


@dataclass(frozen=True)
class Scope:
    """One key value of a job type with ``limit_key``: the slots and rate windows its attempts count
    in, and the line its jobs are parked in while the key is at its limit. The end of an attempt
    frees its slot and gives the next job parked in its queue's line its turn (``lua/fair.lua``)."""

    name: str  # the job type's canonical name: aliases share their limits
    value: str
    concurrency: int  # 0: no concurrency limit
    rate: int  # starts per period; 0: no rate limit
    period: float

    @property
    def member(self) -> str:
        return keys.limit_scope(self.name, self.value)

    def places(self, queue: str) -> list[str]:
        """Its slots, its line in ``queue``, and that queue's index of lines."""
        return [keys.slots_key(self.member), keys.parked_line(queue, self.member), keys.parked_index(queue)]

    def arg(self) -> str:
        """What ``next_turn`` in ``lua/fair.lua`` reads: the limits, the rate counter and job hash
        prefixes, the member of the index, and how long a job it wakes holds the slot."""
        prefixes = [keys.rate_prefix(self.member), keys.JOB_PREFIX, self.member]
        return json.dumps([self.concurrency, self.rate, self.period, *prefixes, TURN_HOLD])


@dataclass(frozen=True)
class Finished:
    """A job that ran to success, for the next claim to complete: its lease token, its queue, its
    return value as JSON if its job keeps results, and the key whose slot it frees (``limit_key``)."""

    token: str
    queue: str
    result: str | None = None
    scope: Scope | None = None


@dataclass(frozen=True)
class Claimed:
    """A job this worker now holds a lease on; ``record`` is its hash as the claim found it.

    ``worker`` is the name the claim added to the job's workers; empty when the supervisor or the
    reaper reads a claimed job back, whose record already names it."""

    queue: str
    id: str
    token: str
    record: JobRecord
    worker: str = ""

    @property
    def fields(self) -> dict[str, bytes]:
        """The raw hash, for snapshots."""
        return self.record.fields

    @property
    def attempt(self) -> int:
        """This attempt's number, 1-based (the claim already counted it); 0 for a job a claim dropped
        because it expired before it started."""
        return int_field(self.record.fields, "dj_attempt", 1)


class Claim(NamedTuple):
    """What one claim did: whether the job it completed is finished (False: its lease was gone), the
    job it claimed, if any, and the jobs it dropped unrun because they expired before they started
    (read back as claims without a lease: ``token`` empty, ``attempt`` 0)."""

    completed: bool
    claimed: Claimed | None
    expired: tuple[Claimed, ...] = ()


def _pairs(flat: Sequence[Any]) -> dict[str, bytes]:
    return {
        k.decode() if isinstance(k, bytes) else str(k): v for k, v in zip(flat[::2], flat[1::2], strict=False)
    }


def _expired(queues: Sequence[str], flat: Sequence[Any] | None) -> tuple[Claimed, ...]:
    """The jobs a claim dropped because they expired: its reply's (queue number, id, fields) triples."""
    if not flat:
        return ()  # the plain path: nothing expired, and the script said so with a nil
    return tuple(
        Claimed(queues[int(number) - 1], text(job_id), "", JobRecord(text(job_id), _pairs(fields)))
        for number, job_id, fields in zip(flat[::3], flat[1::3], flat[2::3], strict=True)
    )


def _flat(fields: dict[str, Any]) -> list[Any]:
    return [item for pair in fields.items() for item in pair]


def _limit_arg(limits: str, layout: list[str], queues: Sequence[str] = ()) -> str:
    """The limits argument of the claim and maintenance scripts: ``limits_json()`` with, per name, the
    index in KEYS of its type's slots (appended to ``layout`` once per canonical name; 0 without a
    concurrency limit) and its rate counters' prefix; a name with ``limit_key`` gets 0, the prefixes of
    rate counters and slots, and its scope's prefix ``<canonical name>\\n`` instead (``lua/fair.lua``).
    A paused type's name (its sixth item true) also gets (after two falses without ``limit_key``) its
    field in the paused hash, the index of its first parked list (one per queue of ``queues``,
    appended to ``layout`` once per canonical name) and its canonical name."""
    slots: dict[str, int] = {}
    parked: dict[str, int] = {}
    given: dict[str, list[Any]] = json.loads(limits)
    for limit in given.values():
        concurrency, canonical = limit[0], limit[3]
        keyed, paused = limit[4:5] == [True], limit[5:6] == [True]
        if concurrency > 0 and not keyed and canonical not in slots:
            layout.append(keys.slots_key(canonical))
            slots[canonical] = len(layout)
        if paused and canonical not in parked:
            parked[canonical] = len(layout) + 1
            layout += [keys.parked_key(queue, canonical) for queue in queues]
        if keyed:
            limit[3:] = [0, keys.RATE_PREFIX, keys.SLOTS_PREFIX, keys.limit_scope(canonical, "")]
        else:
            limit[3:] = [slots.get(canonical, 0), keys.rate_prefix(canonical)] + (
                [False, False] if paused else []
            )
        if paused:
            limit += [keys.pause_field("job", canonical), parked[canonical], canonical]
    return json.dumps(given)


@functools.lru_cache(maxsize=64)
def _claim_layout(queues: tuple[str, ...], limits: str) -> tuple[list[str], str]:
    """The claim script's fixed KEYS for these queues and limits, and its limits argument.

    Worked out once per worker and set of pauses (the arguments do not change between claims), so a
    claim costs nothing more than it did when the script built the names itself. A limit whose sixth
    item is true is a paused type's: it gets its field in the paused hash and a parked list per queue.
    """
    layout = [keys.LEASES, keys.DYING, keys.VANISHED, keys.LOST, keys.PAUSED, keys.PARKED]
    for queue in queues:
        layout += [keys.queue_key(queue), keys.scheduled_key(queue), keys.wip_key(queue)]
        layout += [*keys.priority_keys(queue), keys.parked_index(queue)]
    return layout, _limit_arg(limits, layout, queues)


@functools.lru_cache(maxsize=64)
def _maintain_layout(queues: tuple[str, ...], limits: str) -> tuple[list[str], str]:
    """The maintenance script's KEYS, and its limits: those of the names with ``limit_key``, as the
    claim's entries hold them, by their scope's prefix (``<canonical name>\\n``)."""
    layout = [keys.LEASES, keys.LOST, keys.DYING, keys.QUEUES_SET]
    for queue in queues:
        layout += [keys.scheduled_key(queue), keys.queue_key(queue), keys.wake_key(queue)]
        layout += [*keys.priority_keys(queue), keys.parked_index(queue)]
    entries = json.loads(_limit_arg(limits, []))  # a type's slots are the claim's business only
    keyed = [limit for limit in entries.values() if len(limit) > 5 and limit[5]]  # see _limit_arg
    return layout, json.dumps({limit[6]: limit for limit in keyed})


def _scope_keys(finished: Finished) -> list[str]:
    """What the completion of a job with ``limit_key`` touches besides its own keys: its scope's
    places, and where its queue's next parked job goes (its ready places and wake list)."""
    if finished.scope is None:
        return []
    where = finished.queue
    return [*finished.scope.places(where), *keys.ready_keys(where), keys.wake_key(where)]


class Store:
    """The transitions of jobs on one Redis connection; :meth:`of` shares one per connection."""

    WAKE_CAP = 64
    UNIQUE_TTL = 7 * 24 * 3600

    def __init__(self, connection: Redis) -> None:
        self.connection = connection
        self._push = load(connection, "push")
        self._complete_and_claim = load(connection, "complete_and_claim")
        self._fail = load(connection, "fail")
        self._release = load(connection, "release")
        self._heartbeat = load(connection, "heartbeat")
        self._maintain = load(connection, "maintain")
        self._buried = load(connection, "buried")
        self._due = load(connection, "due")
        self._defer = load(connection, "defer")
        self._snooze = load(connection, "snooze")
        self._cancel = load(connection, "cancel")
        self._run_now = load(connection, "run_now")
        self._move_aside = load(connection, "move_aside")
        self._pause = load(connection, "pause")
        self._unpark = load(connection, "unpark")

    @classmethod
    def of(cls, connection: Redis) -> Store:
        """The store of ``connection``, built once: registering the scripts hashes their text."""
        store = _stores.get(connection)
        if store is None:
            store = _stores[connection] = cls(connection)
        return store

    def push(self, jobs: Iterable[Pushable], chunk: int = 500) -> set[str]:
        """Push jobs in one round trip; returns the ids not pushed (already there, or unique duplicates)."""
        calls, args = push_calls(list(jobs), chunk)
        seen: set[str] = set()
        if not calls:
            return seen
        if len(calls) == 1:  # the common case: one EVALSHA, no pipeline (which would add SCRIPT EXISTS)
            results = [self._push(keys=calls[0][0], args=[calls[0][1], *args])]
        else:
            with self.connection.pipeline(transaction=False) as pipe:
                for call_keys, data in calls:
                    self._push(keys=call_keys, args=[data, *args], client=pipe)
                results = pipe.execute()
        for result in results:
            seen.update(text(x) for x in result)
        return seen

    def statuses(self, job_ids: Sequence[str]) -> dict[str, str | None]:
        """Each job's status field, None where its hash is gone ("" where the key is not a hash):
        one round trip, O(ids)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(keys.job_key(job_id), "status")
            found = pipe.execute(raise_on_error=False)
        return {
            job_id: "" if isinstance(status, Exception) else None if status is None else text(status)
            for job_id, status in zip(job_ids, found, strict=True)
        }

    def complete_and_claim(
        self,
        queues: Sequence[str],
        *,
        finished: Finished | None,
        worker_name: str,
        lease_seconds: float,
        nonce: str,
        finished_ttl: int,
        limits: str = "{}",
        limit_wait: float = 0.5,
        prioritized: Collection[str] | None = None,
    ) -> Claim:
        """Complete ``finished`` if given, then claim the next job, in one round trip.

        ``limits`` is the JSON of ``registry.limits_json``; a job over its limit is deferred, not
        claimed, and one that expired before it started is dropped, never run (:attr:`Claim.expired`).
        ``prioritized``: the queues whose high-priority set may hold jobs (:meth:`claim_state`; None:
        all); another queue's is asked only once its list is empty, which spares a plain claim a command.
        """
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        layout, limit_arg = _claim_layout(tuple(queues), limits)
        token, done, ended = "", [], ["", ""]  # ended: the finished job's scope and result
        if finished:
            token = finished.token
            done = [keys.wip_key(finished.queue), keys.job_key(split_token(token)), *_scope_keys(finished)]
            ended = [finished.scope.arg() if finished.scope else "", finished.result or ""]
        args: list[str | float] = [token, len(queues), stamp, finished_ttl, worker_name, lease_seconds, stamp]
        high = "".join("1" if prioritized is None or q in prioritized else "0" for q in queues)
        tail: list[str | float] = [nonce, limit_arg, limit_wait, keys.JOB_PREFIX, PARK_RECHECK, high, *queues]
        reply = self._complete_and_claim(keys=layout + done, args=[*args, *tail, *ended])
        ok, expired = bool(reply[0]), _expired(queues, reply[1])
        while len(reply) == 3:  # it deferred, parked or dropped a batch of jobs: look behind them
            reply = self._complete_and_claim(keys=layout, args=["", *args[1:], *tail, "", ""])
            expired += _expired(queues, reply[1])
        if len(reply) == 2:
            return Claim(ok, None, expired)
        number, job_id, token_b, flat = reply[2:]
        fields = _pairs(flat)
        fields["dj_attempt"] = str(int_field(fields, "dj_attempt", 0) + 1).encode()  # as the script counted
        record = JobRecord(job_id.decode(), fields)
        return Claim(
            ok, Claimed(queues[int(number) - 1], record.id, token_b.decode(), record, worker_name), expired
        )

    def complete(self, finished: Finished, finished_ttl: int) -> bool:
        """Mark one attempt finished, claiming nothing (the hot path completes inside the next claim)."""
        return self.complete_and_claim(
            [], finished=finished, worker_name="", lease_seconds=0, nonce="", finished_ttl=finished_ttl
        ).completed

    def fail(
        self,
        token: str,
        queue: str,
        *,
        delay: float | None,
        fields: dict[str, Any],
        finished_ttl: int,
        lost: bool = False,
        cancel: bool = False,
        scope: Scope | None = None,
    ) -> Settled:
        """Record a failed attempt: retry after ``delay`` seconds (0: at the head of the queue now),
        (``None``) start dead-lettering, or (``cancel``) end it cancelled, as it also ends whatever was
        asked once its cancel was requested. ``lost``: the reaper already moved its lease to LOST.
        ``scope``: the key (``limit_key``) whose slot it frees for the next parked job."""
        source = keys.LOST if lost else keys.LEASES
        where = [
            keys.wip_key(queue),
            keys.job_key(split_token(token)),
            keys.queue_key(queue),
            keys.wake_key(queue),
        ]
        # A message can hold lone surrogates (an exception quoting bad input): kept, not a crash.
        values = [to_bytes(v) if isinstance(v, str) else v for v in _flat(fields)]
        call_keys = [source, *where, keys.scheduled_key(queue), keys.DYING, *keys.priority_keys(queue)]
        if scope is not None:
            call_keys += [keys.LEASES, keys.LOST, *scope.places(queue)]
        mode = -2 if cancel else -1 if delay is None else delay
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        args = [token, mode, stamp, finished_ttl, scope.arg() if scope else "", *values]
        return Settled(self._fail(keys=call_keys, args=args))

    def snooze(
        self, token: str, queue: str, seconds: float, finished_ttl: int, scope: Scope | None = None
    ) -> Settled:
        """Reschedule a running job ``seconds`` from now, at its priority, giving back the attempt its
        claim counted and counting the snooze (``dj_snoozes``), fenced by the lease token like
        :meth:`fail`; a job whose cancel was requested is cancelled instead. ``scope``: the key
        (``limit_key``) whose slot it frees for the next parked job, as a retry does."""
        call_keys = [
            keys.LEASES,
            keys.wip_key(queue),
            keys.job_key(split_token(token)),
            keys.scheduled_key(queue),
        ]
        if scope is not None:
            call_keys += [keys.LOST, *scope.places(queue), *keys.ready_keys(queue), keys.wake_key(queue)]
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        args: list[str | float] = [token, seconds, stamp, finished_ttl, scope.arg() if scope else ""]
        return Settled(self._snooze(keys=call_keys, args=args))

    def release(self, token: str, queue: str, finished_ttl: int, scope: Scope | None = None) -> Settled:
        """Put a running job back at the head of its queue (of its priority) without spending an
        attempt, keeping its key's slot (``scope``: its ``limit_key``'s); a job whose cancel was
        requested is cancelled instead."""
        call_keys = [
            keys.LEASES,
            keys.wip_key(queue),
            keys.queue_key(queue),
            keys.job_key(split_token(token)),
            keys.wake_key(queue),
            *keys.priority_keys(queue),
        ]
        if scope is not None:
            call_keys += [keys.LOST, *scope.places(queue)]
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        args: list[str | int] = [token, stamp, finished_ttl, scope.arg() if scope else ""]
        return Settled(self._release(keys=call_keys, args=args))

    def heartbeat(self, tokens: Sequence[str], lease_seconds: float) -> Beat:
        """Extend these leases; returns the tokens that no longer hold one, and those asked to stop."""
        if not tokens:
            return Beat(set(), set())
        hashes = [keys.job_key(split_token(token)) for token in tokens]
        gone, cancelled = self._heartbeat(keys=[keys.LEASES, *hashes], args=[lease_seconds, *tokens])
        return Beat({text(t) for t in gone}, {text(t) for t in cancelled})

    def cancel(self, job_id: str, finished_ttl: int) -> CancelResult:
        """Cancel a waiting job, or ask a running one to stop (see ``lua/cancel.lua``).

        Two round trips: the job's queue (its hash's ``origin``) names the keys the script is given,
        and so do its parked list, if a paused type parked it (``dj_parked``), and the scope of a job
        waiting its key's turn (``dj_line``): its line, and the slots where a woken one holds its slot.
        A job parked or released in between is asked about again."""
        for _ in range(_CANCEL_TRIES):
            try:
                origin, parked, line = self.connection.hmget(
                    keys.job_key(job_id), ["origin", "dj_parked", "dj_line"]
                )
            except ResponseError:  # not a hash: no job of ours
                return CancelResult.NOT_FOUND
            if origin is None:
                return CancelResult.NOT_FOUND
            queue, name = text(origin), text(parked) if parked is not None else ""
            call_keys = keys.waiting_keys(job_id, queue) + ([keys.parked_key(queue, name)] if name else [])
            scope = text(line) if line is not None else ""
            if scope:
                call_keys += [keys.parked_line(queue, scope), keys.slots_key(scope)]
            stamp = rq_timestamp(dt.datetime.now(dt.UTC))
            reply = int(self._cancel(keys=call_keys, args=[job_id, stamp, finished_ttl, name, scope]))
            if reply in _CANCEL_REPLIES:
                return _CANCEL_REPLIES[reply]
        raise ResponseError(
            f"Job {job_id} kept moving in and out of a parked list or line; nothing cancelled."
        )

    def run_now(self, job_id: str, queue: str) -> int:
        """Move a scheduled job onto its queue now: 1 moved, 0 it was not scheduled, -1 no such job."""
        call_keys = [*keys.waiting_keys(job_id, queue), keys.wake_key(queue), keys.QUEUES_SET]
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        return int(self._run_now(keys=call_keys, args=[job_id, stamp]))

    def pause(self, kind: str, name: str, *, by: str, reason: str) -> bool:
        """Pause a queue or a job type on this server (Redis time, who, why); False if it already was,
        and its record is kept."""
        return bool(self._pause(keys=[keys.PAUSED], args=[keys.pause_field(kind, name), by, reason]))

    def resume(self, kind: str, name: str) -> bool:
        """Lift a pause; False if there was none. A job type's parked jobs stay parked until
        :meth:`unpark` moves them (which it does only once the type is not paused)."""
        return bool(self.connection.hdel(keys.PAUSED, keys.pause_field(kind, name)))

    def pauses(self) -> list[Pause]:
        """Every pause on this server: one HGETALL of a small hash."""
        return _pauses(self.connection.hgetall(keys.PAUSED))  # type: ignore[arg-type]

    def parked_lists(self) -> list[tuple[str, str]]:
        """(queue, job type) of each parked list that may hold jobs; garbage members are skipped."""
        return _parked(self.connection.smembers(keys.PARKED))  # type: ignore[arg-type]

    def held(self, record: JobRecord) -> bool:
        """Whether a queued job waits for a pause to be lifted: it is parked, or its queue or its job
        type (by the name it was queued under) is paused. One round trip unless it is parked."""
        if "dj_parked" in record.fields:
            return True
        fields = [keys.pause_field("queue", record.queue), keys.pause_field("job", record.name)]
        try:
            return any(value is not None for value in self.connection.hmget(keys.PAUSED, fields))
        except ResponseError:  # the paused hash is garbage (runjobs moves it aside): nothing it says
            return False

    def claim_state(self, queues: Sequence[str]) -> tuple[list[Pause], set[str]]:
        """What a work process reads once a second for its claims, in one round trip: :meth:`pauses`,
        and which of ``queues`` have jobs in their high-priority set."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PAUSED)
            for queue in queues:
                pipe.exists(keys.priority_keys(queue)[0])
            raw, *found = pipe.execute()
        return _pauses(raw), {queue for queue, n in zip(queues, found, strict=True) if n}

    def pause_state(self) -> tuple[list[Pause], list[tuple[str, str]]]:
        """:meth:`pauses` and :meth:`parked_lists` in one round trip."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PAUSED)
            pipe.smembers(keys.PARKED)
            raw, members = pipe.execute()
        return _pauses(raw), _parked(members)

    def unpark(self, queue: str, name: str, batch: int = 500) -> tuple[int, int]:
        """Move up to ``batch`` parked jobs of type ``name`` back to the head of ``queue``, unless the
        type is paused (see ``lua/unpark.lua``); returns (moved, still parked)."""
        call_keys = [
            keys.PAUSED,
            keys.PARKED,
            keys.parked_key(queue, name),
            *keys.ready_keys(queue),
            keys.wake_key(queue),
            keys.QUEUES_SET,
        ]
        args: list[str | int] = [keys.pause_field("job", name), batch, keys.JOB_PREFIX, queue, name]
        moved, left = self._unpark(keys=call_keys, args=args)
        return int(moved), int(left)

    def cancel_requested(self, job_id: str) -> bool:
        """Whether the job's cancel was requested (it may be running still)."""
        return bool(self.connection.hexists(keys.job_key(job_id), "dj_cancel"))

    def maintain(self, queues: Sequence[str], limits: str = "{}", batch: int = 500) -> tuple[int, int, int]:
        """Reap expired leases into LOST, promote due scheduled jobs, and wake the jobs parked over their
        key's limit (``limits``: ``registry.limits_json()``) in lines due to be looked at whose key has
        room again; returns the three counts."""
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))  # RQ's meaning: when the job was put on its queue
        layout, limit_arg = _maintain_layout(tuple(queues), limits)
        args: list[str | float] = [batch, stamp, keys.JOB_PREFIX, limit_arg, PARK_RECHECK, TURN_HOLD]
        lost, promoted, woken = self._maintain(keys=layout, args=args)
        return int(lost), int(promoted), int(woken)

    def lost_tokens(self, limit: int = 100) -> list[bytes]:
        """Lost attempts due to be settled, as raw bytes: whatever was planted, the scan never fails."""
        return list(self._due(keys=[keys.LOST], args=[0, limit]))

    def dying(self, older_than: float, limit: int = 100) -> list[bytes]:
        """Jobs stuck between "dead" and "row written" for longer than ``older_than`` seconds (raw ids)."""
        return list(self._due(keys=[keys.DYING], args=[older_than, limit]))

    def defer(self, key: str, member: bytes, seconds: float) -> None:
        """Put one member of LOST, DYING or VANISHED behind the others, so a scan's head always moves on."""
        self._defer(keys=[key], args=[member, seconds])

    def move_aside(self, key: str, moved: str, kind: str) -> bool:
        """Rename a structure key to ``moved`` (see ``keys.quarantine_key``) if it still has the wrong
        type ``kind``; False if someone fixed it meanwhile."""
        return bool(self._move_aside(keys=[key, moved], args=[kind]))

    def vanished(self, limit: int = 100) -> list[VanishedId]:
        """Ids the claim found without a hash that are due, oldest first (a deferred one waits)."""
        found = []
        members: list[bytes] = list(self._due(keys=[keys.VANISHED], args=[0, limit]))
        for member in members:
            queue, _, job_id = text(member).partition("\n")
            found.append(VanishedId(member, queue, job_id))
        return found

    def forget_vanished(self, item: VanishedId) -> bool:
        """Drop an id whose dead letter exists; False if another runjobs already did."""
        return bool(self.connection.zrem(keys.VANISHED, item.member))

    def buried(self, job_id: str, ttl: int) -> None:
        self.settled(keys.DYING, to_bytes(job_id), to_bytes(job_id), ttl)

    def settled(self, key: str, member: bytes, job_id: bytes, ttl: int, queue: str = "") -> None:
        """Drop a member of ``key`` whose dead letter is written; its job hash expires after ``ttl``."""
        call_keys: list[str | bytes] = [key, keys.JOB_PREFIX.encode() + job_id]
        if queue:
            call_keys.append(keys.wip_key(queue))
        self._buried(keys=call_keys, args=[member, ttl])

    def record(self, job_id: str | bytes) -> JobRecord:
        """The job's record, read once; a key that is not a hash gives an unreadable record."""
        name = job_id if isinstance(job_id, str) else to_text(job_id)
        try:
            return JobRecord(name, self.job_fields(job_id))
        except ResponseError as exc:  # not a hash: keep what Redis says about it
            return JobRecord.unreadable(name, str(exc))

    def due_at(self, job_id: str, queue: str) -> float | None:
        """When a scheduled job (a retry, a delayed or a limit-deferred job) is due, Unix time."""
        score = self.connection.zscore(keys.scheduled_key(queue), job_id)
        return float(score) if score is not None else None

    def job_fields(self, job_id: str | bytes) -> dict[str, bytes]:
        """The job hash; field names that are not UTF-8 come back as :func:`to_text` strings."""
        key = keys.JOB_PREFIX.encode() + job_id if isinstance(job_id, bytes) else keys.job_key(job_id)
        raw: dict[bytes, bytes] = self.connection.hgetall(key)  # type: ignore[assignment]
        return {to_text(k): v for k, v in raw.items()}

    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds (in Redis time) until the first scheduled job of these queues is due, or a line of
        jobs parked over their key's limit is looked at next; None if none."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            for queue in queues:
                pipe.zrange(keys.scheduled_key(queue), 0, 0, withscores=True)
                pipe.zrange(keys.parked_index(queue), 0, 0, withscores=True)
            (now_s, now_us), *firsts = pipe.execute()
        dues = [float(first[0][1]) for first in firsts if first]
        return min(dues) - (now_s + now_us / 1e6) if dues else None


def _pauses(raw: dict[bytes, bytes]) -> list[Pause]:
    found = (Pause.parse(field, value) for field, value in raw.items())
    return sorted((p for p in found if p is not None), key=lambda p: (p.kind, p.name))


def _parked(members: Iterable[bytes]) -> list[tuple[str, str]]:
    """The members of the set of parked lists (JSON ``[queue, name]``, written by the claim script)
    as pairs, sorted; a member that is not one is skipped."""
    found = []
    for member in members:
        try:
            queue, name = json.loads(member)
        except (ValueError, TypeError):
            continue
        if isinstance(queue, str) and isinstance(name, str):
            found.append((queue, name))
    return sorted(found)


def push_calls(
    batch: Sequence[Pushable], chunk: int = 500
) -> tuple[list[tuple[list[str], str]], list[str | int]]:
    """The push script's calls for ``batch`` (KEYS and JSON per chunk of jobs) and its common ARGV tail."""
    calls = [_push_call(batch[start : start + chunk]) for start in range(0, len(batch), chunk)]
    return calls, [Store.WAKE_CAP, Store.UNIQUE_TTL, keys.JOB_PREFIX, keys.scheduled_key("")]


def _push_call(jobs: Sequence[Pushable]) -> tuple[list[str], str]:
    """KEYS and the JSON argument of one push: each queue's keys once, then each job's own keys."""
    layout = [keys.QUEUES_SET]
    base: dict[str, int] = {}
    batch = []
    for j in jobs:
        if j.queue not in base:
            base[j.queue] = len(layout) + 1
            layout += [keys.queue_key(j.queue), keys.scheduled_key(j.queue), keys.wake_key(j.queue)]
            layout += keys.priority_keys(j.queue)
        layout.append(keys.job_key(j.id))
        job_index = len(layout)
        marker = 0
        if j.unique_key:
            layout.append(keys.unique_key(j.unique_key))
            marker = len(layout)
        fields = _flat(j.fields())
        batch.append([j.id, base[j.queue], j.due, fields, marker, j.debounce, job_index, j.priority])
    return layout, json.dumps(batch)


_stores: weakref.WeakKeyDictionary[Redis, Store] = weakref.WeakKeyDictionary()
