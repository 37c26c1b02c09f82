"""The values the store's transitions take and give back: what a push needs of a job, what a claim,
a cancel, a settling and a heartbeat did, a pause, a scope of a limit key."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from django_jobs.store import keys
from django_jobs.store.lifecycle import F
from django_jobs.store.record import JobRecord, int_field, to_text

#: Seconds until maintenance looks at a line of parked jobs again, in case a wake-up was missed.
PARK_RECHECK = 1.0
#: Seconds a job woken from its line holds its slot for itself, waiting to be claimed (``lua/fair.lua``).
TURN_HOLD = 60.0


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

    def places(self, queue: str, space: keys.Keyspace) -> dict[str, str]:
        """What the scripts' ``scope`` is given, in the namespace ``space``: its slots, its line in
        ``queue``, the paused hash (a paused type's line is not woken), and :meth:`arg`."""
        return {
            "slots": space.slots(self.member),
            "line": space.parked_line(queue, self.member),
            "paused": space.paused,
            "limits": self.arg(space),
        }

    def arg(self, space: keys.Keyspace) -> str:
        """What ``next_turn`` in ``lua/fair.lua`` reads: the limits, the rate counter and job hash
        prefixes, the member of the index, how long a job it wakes holds the slot, and its type's
        field in the paused hash."""
        limits = {"concurrency": self.concurrency, "rate": self.rate, "period": self.period}
        prefixes = {"rate_prefix": space.rate_prefix(self.member), "prefix": space.job_prefix}
        turn = {"scope": self.member, "hold": TURN_HOLD, "paused_field": keys.pause_field("job", self.name)}
        return json.dumps({**limits, **prefixes, **turn})


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
        return int_field(self.record.fields, F.ATTEMPT, 1)


class Claim(NamedTuple):
    """What one claim did: whether the job it completed is finished (False: its lease was gone), the
    job it claimed, if any, and the jobs it dropped unrun because they expired before they started
    (read back as claims without a lease: ``token`` empty, ``attempt`` 0)."""

    completed: bool
    claimed: Claimed | None
    expired: tuple[Claimed, ...] = ()


class Batch(NamedTuple):
    """What one claim of several jobs did: how many of its completions found their lease, the jobs
    it leased (in the order single claims would have), and the jobs it dropped because they expired."""

    finished: int
    leased: tuple[Claimed, ...]
    expired: tuple[Claimed, ...] = ()
