"""The lifecycle of a job, as one table: where each state lives in Redis, what the hash says there,
and which transition moves a job from one state to the next.

A job's state is not written down as such: it is which structure holds its id (:data:`STRUCTURES`),
read together with the hash's ``status`` and a few flags (:class:`F`). This module names all three
once; ``keys`` builds every key name from :data:`STRUCTURES`, ``read`` finds a job's state from
:data:`STATES`, and ``audit`` checks that Redis agrees with the table. Pure Python: no Redis call,
no Django import (the store never imports Django).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple


class Status(enum.StrEnum):
    """RQ's job statuses, as the ``status`` field of a job hash holds them."""

    QUEUED = "queued"
    STARTED = "started"
    SCHEDULED = "scheduled"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELED = "canceled"


#: The statuses of a job that ended: nothing holds its id any more, and its hash expires.
ENDED = frozenset({Status.FINISHED, Status.FAILED, Status.CANCELED})
#: The statuses of a job that may still run: a push of the same unique key is a duplicate.
PENDING = frozenset({Status.QUEUED, Status.STARTED, Status.SCHEDULED})


class F:
    """The fields django_jobs writes on a job hash (``rq:job:<id>``): RQ's that it relies on, then its own."""

    # RQ's own fields, kept in RQ's format so RQ's tools read our jobs
    STATUS = "status"  #: a :class:`Status`
    ORIGIN = "origin"  #: the queue it was enqueued on; never changes
    DESCRIPTION = "description"  #: its job name (a bare name, or RQ's ``name(args...)``)
    DATA = "data"  #: the payload (JSON shaped like RQ's JSONSerializer output)
    TIMEOUT = "timeout"  #: its hard timeout, seconds
    CREATED_AT = "created_at"  #: when enqueue() ran (RQ timestamp)
    ENQUEUED_AT = "enqueued_at"  #: when it last went onto its queue (each promotion moves it)
    STARTED_AT = "started_at"  #: the current (last) attempt's start
    ENDED_AT = "ended_at"  #: when it ended (finished, dead, cancelled, expired)
    WORKER_NAME = "worker_name"  #: the worker of the current (last) attempt
    LAST_HEARTBEAT = "last_heartbeat"  #: written at each claim, for RQ's tools
    # django_jobs's fields
    ATTEMPT = "dj_attempt"  #: attempts counted so far (the claim counts each; a snooze gives one back)
    FIRST_STARTED = "dj_first_started"  #: the first start: it started once (never given back)
    WORKERS = "dj_workers"  #: every attempt's worker, newline-separated, newest last
    HISTORY = "dj_history"  #: JSON list of the failed attempts (exception, message, traceback)
    REASON = "dj_reason"  #: why its last attempt failed (a dead letter reason)
    EXCEPTION = "dj_exception"  #: its last failure's exception class path
    MESSAGE = "dj_message"  #: its last failure's message
    RESULT = "dj_result"  #: the JSON return value of a finished job that keeps results
    PRIORITY = "dj_priority"  #: -100..100, absent for 0: where a ready id waits (list, high or low set)
    TRACE = "dj_trace"  #: the enqueuer's trace context
    CRON = "dj_cron"  #: the periodic run it belongs to
    BATCH = "dj_batch"  #: the batch it is a member of
    EXPIRES = "dj_expires"  #: Unix time: not started by then (no dj_first_started), it is dropped unrun
    EXPIRED = "dj_expired"  #: set (to when) on a job dropped unrun because it expired; status canceled
    SNOOZES = "dj_snoozes"  #: how often it snoozed
    CANCEL = "dj_cancel"  #: when a running job was asked to stop
    REPLACED_BY = "dj_replaced_by"  #: the id of the debounced job that replaced this one (a tombstone)
    PARKED = "dj_parked"  #: the paused job type whose parked list holds it
    LIMIT_KEY = "dj_limit_key"  #: its key value under its type's ``limit_key``
    LINE = "dj_line"  #: the scope of the key line it waits in, or whose turn it holds
    TURN = "dj_turn"  #: its place in that line (microseconds; 0: the front)
    OUTBOX_OPTIONS = "dj_outbox_options"  #: a quarantined outbox row's options, in its dead letter's snapshot
    LEDGER = "dj_ledger"  #: pushed with a ledger row ("ledger" queues): once that row is gone, the job ran


#: A field of the worker record (``WORKER``) each runjobs work process writes. A record without it that
#: has RQ's own ``version`` field (:data:`RQ_VERSION`) is a foreign worker's (an ``rqworker`` left on a
#: django_jobs queue), which fails the jobs it takes; one with neither is a runjobs of an older release.
RUNJOBS_MARK = "dj_runjobs"
RQ_VERSION = "version"


def foreign_worker(record: Mapping[bytes, object]) -> bool:
    """Whether a worker record (raw HGETALL) is a foreign worker's."""
    return RUNJOBS_MARK.encode() not in record and RQ_VERSION.encode() in record


class Kind(enum.StrEnum):
    """The Redis type of a structure (as ``TYPE`` names it)."""

    LIST = "list"
    ZSET = "zset"
    SET = "set"
    HASH = "hash"
    STRING = "string"
    STREAM = "stream"


class Member(enum.Enum):
    """What a structure's members (or fields) are."""

    ID = "a bare job id"
    TOKEN = "a lease token <id>:<nonce>"
    TOKEN_OR_ID = "a lease token, or a bare id holding a slot for its turn"
    QUEUE_ID = "<queue>\\n<id>"
    SCOPE = "a limit scope <name>\\n<value>"
    QUEUE_KEY = "a queue's list key"
    QUEUE_TYPE = "JSON [queue, job type]"
    PAUSE = "queue:<q> or job:<name> -> JSON {at, by, reason}"
    TICK = "a wake-up token '1'"
    NONE = "not a collection of ids"


@dataclass(frozen=True)
class Structure:
    """One kind of Redis key: its name pattern (``{part}`` placeholders; the text before the first is
    its prefix), its type, and what it holds. ``shared``: one key for every queue of any namespace
    (RQ's worker records, the cron locks, the counters, the alert gates), never touched by a script
    together with a namespace's keys; every other structure lives in a queue's namespace
    (``keys.Keyspace``), so on a Redis Cluster a transition's keys share one hash slot."""

    pattern: str
    kind: Kind
    member: Member
    doc: str
    shared: bool = False

    @property
    def prefix(self) -> str:
        return self.pattern.partition("{")[0]

    def key(self, **parts: str) -> str:
        return self.pattern.format(**parts)


S = Structure


def G(pattern: str, kind: Kind, member: Member, doc: str) -> Structure:
    """A ``shared`` structure: one key for every namespace."""
    return Structure(pattern, kind, member, doc, shared=True)


# Jobs and queues, where RQ keeps them
JOB = S("rq:job:{id}", Kind.HASH, Member.NONE, "the job hash; fields in F")
QUEUE = S("rq:queue:{queue}", Kind.LIST, Member.ID, "ready ids of priority 0, FIFO")
QUEUES = S("rq:queues", Kind.SET, Member.QUEUE_KEY, "the queue keys (RQ's own index)")
SCHEDULED = S("rq:scheduled:{queue}", Kind.ZSET, Member.ID, "due time -> id: retries, delayed, snoozed")
WIP = S("rq:wip:{queue}", Kind.ZSET, Member.TOKEN, "RQ's started registry, scored +inf (for its tools)")
WORKER = G("rq:worker:{name}", Kind.HASH, Member.NONE, "RQ's worker record")
WORKERS = G("rq:workers", Kind.SET, Member.NONE, "the worker keys")
QUEUE_WORKERS = G("rq:workers:{queue}", Kind.SET, Member.NONE, "the worker keys of a queue")
# What a foreign worker (an rqworker on a django_jobs queue) leaves: RQ's failed registry and results
RQ_FAILED = S("rq:failed:{queue}", Kind.ZSET, Member.ID, "RQ's failed registry: jobs a foreign worker failed")
RQ_RESULTS = S("rq:results:{id}", Kind.STREAM, Member.NONE, "RQ's results of a job: a foreign worker's error")
# django_jobs's own, per queue
HIGH = S("djjobs:prio:{queue}:high", Kind.ZSET, Member.ID, "ready ids of priority > 0 (lua/ready.lua)")
LOW = S("djjobs:prio:{queue}:low", Kind.ZSET, Member.ID, "ready ids of priority < 0")
WAKE = S("djjobs:wake:{queue}", Kind.LIST, Member.TICK, "wake-up tokens idle workers block on")
LINES = S("djjobs:parked:{queue}", Kind.ZSET, Member.SCOPE, "scopes with a key line, by next look")
LINE = S("djjobs:parked:{queue}\n{scope}", Kind.ZSET, Member.ID, "a key line: ids by turn (lua/fair.lua)")
PARKED = S("djjobs:paused:{queue}:{name}", Kind.LIST, Member.ID, "ids of a paused type, in the order popped")
# global, per server
LEASES = S("djjobs:leases", Kind.ZSET, Member.TOKEN, "running attempts, by lease expiry")
LOST = S("djjobs:lost", Kind.ZSET, Member.TOKEN, "attempts whose lease expired, to be settled")
DYING = S("djjobs:dying", Kind.ZSET, Member.ID, "ids being dead-lettered, until their row exists")
VANISHED = S("djjobs:vanished", Kind.ZSET, Member.QUEUE_ID, "ids popped without a hash")
PAUSED = S("djjobs:paused", Kind.HASH, Member.PAUSE, "what is paused on this server")
PARKED_LISTS = S("djjobs:paused:lists", Kind.SET, Member.QUEUE_TYPE, "the parked lists that may hold ids")
# limits, unique keys
SLOTS = S("djjobs:slots:{scope}", Kind.ZSET, Member.TOKEN_OR_ID, "concurrency slots of a type or key scope")
RATE = S("djjobs:rate:{scope}:{window}", Kind.STRING, Member.NONE, "starts in one rate window")
UNIQUE = S("djjobs:unique:{key}", Kind.STRING, Member.NONE, "the id of the job holding a unique key")
# bookkeeping
PRIMARY = S("djjobs:primary", Kind.HASH, Member.NONE, "the primary last seen (failover detection)")
REPLICATION_MARK = S("djjobs:replmark", Kind.STRING, Member.NONE, "bumped by a replicated push")
CRON_LOCK = S(
    "djjobs:cron:{name}:{start}", Kind.STRING, Member.NONE, "a periodic run's fire lock", shared=True
)
STATS_MINUTE = S(
    "djjobs:stats:m:{minute}", Kind.HASH, Member.NONE, "outcome counters of a minute", shared=True
)
STATS_HOUR = G("djjobs:stats:h:{hour}", Kind.HASH, Member.NONE, "outcome counters of an hour")
ALERT_DUE = S(
    "djjobs:alertdue", Kind.ZSET, Member.NONE, "alert groups whose window closes, by when", shared=True
)
ALERT_WINDOW = S(
    "djjobs:alert:{fingerprint}", Kind.STRING, Member.NONE, "an alert group's open window", shared=True
)
ALERT_COUNT = S(
    "djjobs:alertcount:{fingerprint}", Kind.STRING, Member.NONE, "dead letters not reported", shared=True
)
ALERT_LAST = S(
    "djjobs:alertlast:{fingerprint}", Kind.STRING, Member.NONE, "its last counted dead letter", shared=True
)
QUARANTINE = S(
    "djjobs:quarantine:{key}:{when}", Kind.STRING, Member.NONE, "a wrong-typed key, moved aside", shared=True
)
del S, G

STRUCTURES: dict[str, Structure] = {
    name: value for name, value in dict(globals()).items() if isinstance(value, Structure)
}


class QueueKeys(NamedTuple):
    """Every per-queue key, in one fixed order (the order scripts take them in)."""

    list: str
    scheduled: str
    wip: str
    high: str
    low: str
    wake: str
    lines: str


class State(enum.Enum):
    """Every state a job can be in. Its value is the state's name as shown; :data:`STATES` says where it
    lives and what its hash says there."""

    WAITING = "waiting"
    """Ready, priority 0: in its queue's list."""
    WAITING_PRIORITY = "waiting with a priority"
    """Ready, priority above or below 0: in its queue's high or low set."""
    TURN = "waiting with its key's turn"
    """Woken from its key's line (or handed back holding it): ready, holding a slot of its key
    (its bare id in the scope's slots) until it is claimed; ``dj_line`` and ``dj_turn`` kept."""
    HELD = "held by a pause"
    """Ready, but its queue (or its type, not yet popped) is paused: no worker takes it."""
    SCHEDULED = "scheduled"
    """Waiting for its due time: delayed at enqueue, debounced, or deferred over its type's limit."""
    RETRYING = "retrying"
    """Waiting out a retry's backoff after a failed attempt (``dj_attempt`` > 0)."""
    SNOOZED = "snoozed"
    """Waiting after a snooze (``dj_snoozes`` > 0, no attempt counted)."""
    PARKED = "parked by a paused type"
    """Popped while its type was paused: in the type's parked list, ``dj_parked`` its name."""
    IN_LINE = "parked in its key's line"
    """Over its key's limit, or behind jobs already waiting for its key: in its key's line."""
    RUNNING = "running"
    """Leased: its token in the leases and its queue's wip set."""
    LOST = "lost"
    """Its lease expired unrenewed (its worker died); the supervisor settles it (retry or dead)."""
    DYING = "dying"
    """Dead (or unreadable) and being dead-lettered: it leaves once the dead letter row exists."""
    VANISHED = "vanished"
    """Popped from its queue after its hash was gone: waits for its dead letter; no hash."""
    FINISHED = "finished"
    """Ran to success; nothing holds its id, its hash expires."""
    DEAD = "dead"
    """Dead-lettered: its row exists; its hash expires."""
    CANCELLED = "cancelled"
    """Cancelled before it ran, or its attempt ended after a cancel request."""
    EXPIRED = "expired"
    """Dropped unrun by the claim: it had never started (no ``dj_first_started``) by its expiry
    (``dj_expired``). A hand-back or a snooze gives an attempt back, not the start."""
    REPLACED = "replaced"
    """A debounced job a newer enqueue replaced: a tombstone (``dj_replaced_by``) with no data."""
    FOREIGN = "failed by a foreign worker"
    """Taken and failed by a foreign worker (an ``rqworker`` on its queue, which cannot run it): in RQ's
    failed registry, its payload rewritten by RQ; runjobs reclaims it into the dead letters."""


@dataclass(frozen=True)
class Place:
    """Where a state lives and what its hash carries: the structures (any one of them) holding its id,
    its status (None: no hash, or any), and fields it must have."""

    structures: tuple[Structure, ...]
    status: Status | None
    fields: tuple[str, ...] = ()
    hash: bool | None = True  # False: the state is a missing hash (vanished); None: it may be missing


READY = (QUEUE, HIGH, LOW)
STATES: dict[State, Place] = {
    State.WAITING: Place((QUEUE,), Status.QUEUED),
    State.WAITING_PRIORITY: Place((HIGH, LOW), Status.QUEUED),
    State.TURN: Place(READY, Status.QUEUED, (F.LINE, F.TURN)),
    State.HELD: Place(READY, Status.QUEUED),
    State.SCHEDULED: Place((SCHEDULED,), Status.SCHEDULED),
    State.RETRYING: Place((SCHEDULED,), Status.SCHEDULED, (F.ATTEMPT,)),
    State.SNOOZED: Place((SCHEDULED,), Status.SCHEDULED, (F.SNOOZES,)),
    State.PARKED: Place((PARKED,), Status.QUEUED, (F.PARKED,)),
    State.IN_LINE: Place((LINE,), Status.QUEUED, (F.LINE, F.TURN)),
    State.RUNNING: Place((LEASES,), Status.STARTED),
    State.LOST: Place((LOST,), Status.STARTED),
    State.DYING: Place((DYING,), None, hash=None),  # a poison id, or a scheduled id whose hash vanished
    State.VANISHED: Place((VANISHED,), None, hash=False),
    State.FINISHED: Place((), Status.FINISHED),
    State.DEAD: Place((), Status.FAILED),
    State.CANCELLED: Place((), Status.CANCELED),
    State.EXPIRED: Place((), Status.CANCELED, (F.EXPIRED,)),
    State.REPLACED: Place((), Status.CANCELED, (F.REPLACED_BY,)),
    State.FOREIGN: Place((RQ_FAILED,), Status.FAILED),
}

#: The structures that hold a job's id (or token) while it is in some state: an id is in exactly one
#: of them (wip mirrors leases and lost; slots hold attempts, not states).
HOLDERS = (QUEUE, HIGH, LOW, SCHEDULED, PARKED, LINE, LEASES, LOST, DYING, VANISHED, RQ_FAILED)


def scheduled_state(fields: Mapping[str, bytes]) -> State:
    """Which of the scheduled states a scheduled job is in. The hash cannot tell a retry that later
    snoozed from one that did not: a counted attempt (a failure) wins."""
    if _number(fields.get(F.ATTEMPT)) > 0:
        return State.RETRYING
    if _number(fields.get(F.SNOOZES)) > 0:
        return State.SNOOZED
    return State.SCHEDULED


def ended_state(status: Status, fields: Mapping[str, bytes]) -> State:
    """Which ended state a job whose status is ``status`` (one of :data:`ENDED`) is in."""
    if status is Status.FINISHED:
        return State.FINISHED
    if status is Status.FAILED:
        return State.DEAD
    if F.EXPIRED in fields:
        return State.EXPIRED
    return State.REPLACED if F.REPLACED_BY in fields else State.CANCELLED


def _number(raw: bytes | None) -> float:
    try:
        return float(raw) if raw is not None else 0.0
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Transition:
    """One move of a job between states, and what performs it (a script in ``lua/``, or Python)."""

    name: str
    sources: frozenset[State]
    targets: frozenset[State]
    by: str
    doc: str


def _t(name: str, sources: set[State], targets: set[State], by: str, doc: str) -> Transition:
    return Transition(name, frozenset(sources), frozenset(targets), by, doc)


_READY = {State.WAITING, State.WAITING_PRIORITY, State.TURN, State.HELD}
_WAITING_ALL = _READY | {State.SCHEDULED, State.RETRYING, State.SNOOZED, State.PARKED, State.IN_LINE}
_READY_AGAIN = {State.WAITING, State.WAITING_PRIORITY}

TRANSITIONS: tuple[Transition, ...] = (
    _t(
        "push",
        set(),
        _READY_AGAIN | {State.SCHEDULED, State.REPLACED},
        "lua/push.lua",
        "a new id onto its queue (by priority) or its scheduled set; a debounce replaces the waiting one",
    ),
    _t("claim", _READY, {State.RUNNING}, "lua/complete_and_claim.lua", "leased: a token in leases and wip"),
    _t("expire", _READY, {State.EXPIRED}, "lua/complete_and_claim.lua", "popped after its expiry: dropped"),
    _t(
        "park",
        _READY,
        {State.PARKED, State.IN_LINE},
        "lua/complete_and_claim.lua",
        "popped while its type is paused (one of a key: into its key's line, not woken until a resume)",
    ),
    _t(
        "line",
        _READY,
        {State.IN_LINE},
        "lua/complete_and_claim.lua (fair.lua park)",
        "over its key's limit, or behind its key's line",
    ),
    _t("defer", _READY, {State.SCHEDULED}, "lua/complete_and_claim.lua", "over its type's limit"),
    _t(
        "poison",
        _READY | {State.SCHEDULED, State.RETRYING, State.SNOOZED},
        {State.DYING},
        "lua/complete_and_claim.lua, lua/maintain.lua",
        "its key is not a hash, or its id breaks the id rule",
    ),
    _t("vanish", _READY, {State.VANISHED}, "lua/complete_and_claim.lua", "popped, its hash gone"),
    _t("complete", {State.RUNNING}, {State.FINISHED}, "lua/complete_and_claim.lua", "its attempt succeeded"),
    _t("heartbeat", {State.RUNNING}, {State.RUNNING}, "lua/heartbeat.lua", "its lease extended"),
    _t(
        "retry",
        {State.RUNNING, State.LOST},
        {State.RETRYING} | _READY_AGAIN | {State.TURN},
        "lua/fail.lua",
        "a failed attempt retried after its backoff, or at once at the head of its queue",
    ),
    _t("die", {State.RUNNING, State.LOST}, {State.DYING}, "lua/fail.lua", "no retry left"),
    _t(
        "cancelled",
        {State.RUNNING, State.LOST},
        {State.CANCELLED},
        "lua/fail.lua, lua/release.lua, lua/snooze.lua",
        "an attempt ended after its cancel was requested",
    ),
    _t(
        "release",
        {State.RUNNING},
        _READY_AGAIN | {State.TURN},
        "lua/release.lua",
        "handed back at shutdown, its attempt given back",
    ),
    _t(
        "snooze",
        {State.RUNNING},
        {State.SNOOZED, State.RETRYING},
        "lua/snooze.lua",
        "rescheduled, its attempt given back",
    ),
    _t("reap", {State.RUNNING}, {State.LOST}, "lua/maintain.lua", "its lease expired unrenewed"),
    _t(
        "promote",
        {State.SCHEDULED, State.RETRYING, State.SNOOZED},
        _READY_AGAIN,
        "lua/maintain.lua",
        "due: onto its queue by priority",
    ),
    _t(
        "wake",
        {State.IN_LINE},
        {State.TURN},
        "lua/maintain.lua, lua/fair.lua next_turn",
        "its key has room: back on its queue holding a slot",
    ),
    _t(
        "run_now",
        {State.SCHEDULED, State.RETRYING, State.SNOOZED},
        _READY_AGAIN,
        "lua/run_now.lua",
        "a scheduled job moved onto its queue now",
    ),
    _t(
        "cancel",
        _WAITING_ALL,
        {State.CANCELLED},
        "lua/cancel.lua",
        "a waiting job out of every place it could be (a running one only gets dj_cancel); then"
        " cancellation.cancel deletes its outbox rows before it answers, so no relay or ledger sweep"
        " pushes it again once Redis lost the cancel",
    ),
    _t("pause", _READY_AGAIN | {State.TURN}, {State.HELD}, "lua/pause.lua", "its queue or type paused"),
    _t("resume", {State.HELD}, _READY_AGAIN | {State.TURN}, "Store.resume", "the pause's field deleted"),
    _t(
        "unpark",
        {State.PARKED},
        _READY_AGAIN | {State.TURN},
        "lua/unpark.lua",
        "its type no longer paused: back at the head of its queue",
    ),
    _t(
        "bury",
        {State.DYING, State.LOST},
        {State.DEAD},
        "lua/buried.lua (Store.settled)",
        "its dead letter row exists; the hash expires later",
    ),
    _t("forget_vanished", {State.VANISHED}, set(), "Store.forget_vanished", "its dead letter row exists"),
    _t(
        "foreign",
        _READY,
        {State.FOREIGN},
        "an rqworker (RQ's worker, not django_jobs)",
        "a foreign worker on its queue popped it, could not run it, and failed it",
    ),
    _t(
        "reclaim",
        {State.FOREIGN},
        {State.DYING},
        "lua/reclaim.lua",
        "out of RQ's failed registry into dying, its payload and status restored, to be dead-lettered",
    ),
    _t(
        "retention",
        {State.FINISHED, State.DEAD, State.CANCELLED, State.EXPIRED, State.REPLACED},
        set(),
        "Redis EXPIRE",
        "its hash's retention (FINISHED_TTL) ran out",
    ),
)


@dataclass(frozen=True)
class Gate:
    """One check of the claim on a popped job (``lua/gates/<name>.lua``), in the order of :data:`GATES`;
    the lease follows the last. It lets the job pass on, or moves it into one of ``stops``."""

    name: str
    stops: frozenset[State]
    doc: str


#: The claim's gates, in the order a popped job meets them. A new gate: its file, and a row here. A gate
#: looks only at a job with an expiry or a limits entry: the claim makes the gates (and the job's table)
#: only for such a job, so that a plain job's claim makes none of them.
GATES: tuple[Gate, ...] = (
    Gate("expiry", frozenset({State.EXPIRED}), "a job with no dj_first_started whose dj_expires passed"),
    Gate(
        "pause",
        frozenset({State.PARKED, State.IN_LINE}),
        "a job of a paused type waits in its parked list (one of a key, in its key's line)",
    ),
    Gate("line", frozenset({State.IN_LINE}), "a job of a key waits behind its line, or for room"),
    Gate("concurrency", frozenset({State.SCHEDULED}), "a job of a type at its concurrency limit"),
    Gate("rate", frozenset({State.SCHEDULED, State.IN_LINE}), "a job over its rate (type, or key)"),
)
