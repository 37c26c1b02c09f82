"""The one read model of what Redis holds: queues, workers and leases, for every page and probe.

The admin's overview, the ``/metrics`` gauges and ``manage.py jobs_health`` present what this module
reads; none reads Redis its own way. Strictly read-only, and O(queues + workers), never O(jobs):
LLEN, ZCARD, LINDEX 0 and a few HGETs per queue, plus read-only scripts per server for the
priority sets (``lua/heads.lua``: at most a few commands per priority in use) and the jobs parked
over their key's limit (``lua/parked.lua``: a ZCARD per line, at most ``PARKED_SAMPLE`` lines), in
two pipelined round trips per Redis server (three when the workers' current jobs are asked for),
after redis-py's check that the scripts are loaded; and what is paused: the paused hash and the set
of parked lists (one more round trip), and one LLEN per parked list in the second. It never calls
RQ's registry methods, whose cleanup (run by ``len(registry)``, ``get_job_ids()`` or ``count``, and
by django-rq's dashboard on every view) moves and fails jobs: looking must not change what is seen.
A key of the wrong type (a poison entry) reads as missing, never as an error for the whole read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from django_jobs.core.connections import server_stores
from django_jobs.store import Pause, Status, Store, keys, load, parse_rq_timestamp
from django_jobs.store.keys import Keyspace
from django_jobs.store.lifecycle import F, foreign_worker

WORKERS = keys.WORKERS_SET
#: Lines of parked jobs counted per queue; past them the count is a lower bound.
PARKED_SAMPLE = 1000


@dataclass(frozen=True)
class QueueState:
    name: str
    depth: int
    """Ready jobs: the list's (priority 0) and the priority sets'."""
    oldest_age: float | None
    """Seconds the oldest ready job has waited (the longest of the list's head and each priority's
    head); None when the queue is empty or no head's hash says."""
    running: int
    scheduled: int
    retrying: int
    retrying_is_estimate: bool
    """True when the scheduled set is larger than the sample: ``retrying`` is then a lower bound."""
    parked: int = 0
    """Jobs waiting for a slot of their key (``limit_key``), not counted in ``depth``."""
    parked_is_estimate: bool = False
    """True when the queue has more lines of parked jobs than were counted: ``parked`` is a lower bound."""
    paused: Pause | None = None
    """The queue's pause, while it is paused: its ready jobs wait in it."""
    held: int = 0
    """Its jobs set aside while their job type is paused (parked: not counted in ``depth``)."""


@dataclass(frozen=True)
class WorkerState:
    name: str
    state: str
    """What the worker's record says (RQ's ``state``: busy, idle...); '' when it says nothing."""
    hostname: str
    pid: str
    queues: str
    current_job: str
    heartbeat_age: float | None
    job_running: bool
    """Whether the job hash says the current job still runs (read only when asked for)."""
    job_name: str
    foreign: bool = False
    """A foreign worker's record (an rqworker's, see ``lifecycle.foreign_worker``): it fails our jobs."""

    @property
    def served(self) -> frozenset[str]:
        return frozenset(self.queues.split(","))


@dataclass(frozen=True)
class ServerState:
    """One Redis server: its queues (in the order asked), its live workers, the leases lost or dying,
    what is paused, and how many jobs of each job type are parked."""

    queues: list[QueueState]
    workers: list[WorkerState]
    dying: int
    lost: int
    pauses: list[Pause] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)


def text(value: Any) -> str:
    """A Redis reply as text; a missing value or an error reply (a poison key) is ''."""
    return value.decode(errors="replace") if isinstance(value, bytes) else ""


def attempt(value: Any) -> int:
    try:
        return int(float(text(value) or 0))
    except (ValueError, OverflowError):
        return 0


def age(stamp: Any, now: dt.datetime) -> float | None:
    """Seconds since an RQ timestamp; None if ``stamp`` is not one."""
    then = parse_rq_timestamp(text(stamp))
    if then is None:
        return None
    return max((now - then).total_seconds(), 0.0)


def read_all(
    queues: Sequence[str], now: dt.datetime | None = None, **options: Any
) -> Iterator[tuple[list[str], Redis, ServerState | RedisError]]:
    """:func:`read` of each server behind ``queues``; a server that does not answer yields its error."""
    now = now or dt.datetime.now(dt.UTC)
    for names, store in server_stores(queues):
        state: ServerState | RedisError
        try:
            state = read(store, names, now, **options)
        except RedisError as exc:
            state = exc
        yield names, store.connection, state


def servers(queues: Sequence[str], **options: Any) -> Iterator[ServerState]:
    """:func:`read` of each server behind ``queues``; raises RedisError for one that does not answer."""
    for _, _, state in read_all(queues, **options):
        if isinstance(state, RedisError):
            raise state
        yield state


def read(
    store: Store,
    queues: Sequence[str],
    now: dt.datetime,
    *,
    retry_sample: int = 0,
    current_jobs: bool = False,
) -> ServerState:
    """Queues, workers and leases of one server. ``retry_sample`` scheduled jobs per queue are looked
    at to count retries (attempt > 0); ``current_jobs`` reads what each worker runs."""
    connection, space = store.connection, store.keys
    counts, sample_ids, worker_keys, dying, lost = _counts(store, queues, retry_sample)
    pauses, parked = store.pause_state()
    with connection.pipeline(transaction=False) as pipe:
        for queue, name in parked:
            pipe.llen(space.parked(queue, name))
        for (_, heads, *_), sample in zip(counts, sample_ids, strict=True):
            for head in heads:
                pipe.hget(space.job(text(head)), "enqueued_at")
            for job_id in sample:
                pipe.hget(space.job(text(job_id)), F.ATTEMPT)
        for key in worker_keys:
            pipe.hgetall(key)
        replies = iter(pipe.execute(raise_on_error=False))
    held = [(queue, name, _length(next(replies))) for queue, name in parked]
    states = [
        _queue(name, count, sample, replies, now)
        for name, count, sample in zip(queues, counts, sample_ids, strict=True)
    ]
    # A worker whose hash expired is dead, even if the set still names it: skip it, change nothing.
    records = [(key, r) for key, r in zip(worker_keys, replies, strict=True) if isinstance(r, dict) and r]
    workers = _workers(connection, space, records, now, current_jobs)
    by_type: dict[str, int] = {}
    for _, name, count in held:
        by_type[name] = by_type.get(name, 0) + count
    return ServerState(_paused(states, pauses, held), workers, dying, lost, pauses, by_type)


def _length(reply: Any) -> int:
    return reply if isinstance(reply, int) else 0  # a parked list of the wrong type holds nothing of ours


def _paused(
    states: list[QueueState], pauses: list[Pause], held: list[tuple[str, str, int]]
) -> list[QueueState]:
    """The queues with their pause and their parked jobs."""
    queue_pauses = {pause.name: pause for pause in pauses if pause.kind == "queue"}
    parked: dict[str, int] = {}
    for queue, _, count in held:
        parked[queue] = parked.get(queue, 0) + count
    return [replace(q, paused=queue_pauses.get(q.name), held=parked.get(q.name, 0)) for q in states]


def _counts(
    store: Store, queues: Sequence[str], retry_sample: int
) -> tuple[list[list[Any]], list[list[bytes]], list[str], int, int]:
    """The first round trip: per queue depth, the ids at its heads (the list's, then each priority's),
    running and scheduled; the workers' set; leases."""
    connection, space = store.connection, store.keys
    with connection.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.llen(space.queue(queue))
            pipe.lindex(space.queue(queue), 0)
            pipe.zcard(space.wip(queue))
            pipe.zcard(space.scheduled(queue))
            if retry_sample:
                pipe.zrange(space.scheduled(queue), 0, retry_sample - 1)
        load(connection, "heads")(keys=[k for q in queues for k in space.priority(q)], client=pipe)
        pipe.smembers(WORKERS)
        pipe.zcard(space.dying)
        pipe.zcard(space.lost)
        parked = [space.parked_index(queue) for queue in queues]
        load(connection, "parked")(keys=parked, args=[PARKED_SAMPLE], client=pipe)
        replies = pipe.execute()
    width = 5 if retry_sample else 4
    per_queue = [replies[i : i + width] for i in range(0, width * len(queues), width)]
    samples = [list(part[4]) if retry_sample else [] for part in per_queue]
    sets = replies[-5]  # [how many, band heads...] of each queue's high set, then its low set
    counts = []
    for n, (length, head, running, scheduled) in enumerate(part[:4] for part in per_queue):
        high, low = sets[2 * n], sets[2 * n + 1]
        heads = ([head] if head is not None else []) + high[1:] + low[1:]
        counts.append([length + high[0] + low[0], heads, running, scheduled, *replies[-1][n]])
    worker_keys = sorted(text(key) for key in replies[-4])
    return counts, samples, worker_keys, replies[-3], replies[-2]


def _queue(
    name: str, count: list[Any], sample: list[bytes], replies: Iterator[Any], now: dt.datetime
) -> QueueState:
    depth, heads, running, scheduled, parked, all_lines = count
    ages = [waited for waited in (age(next(replies), now) for _ in heads) if waited is not None]
    retrying = sum(1 for _ in sample if attempt(next(replies)) > 0)
    return QueueState(
        name=name,
        depth=depth,
        oldest_age=max(ages, default=None),
        running=running,
        scheduled=scheduled,
        retrying=retrying,
        retrying_is_estimate=scheduled > len(sample),
        parked=parked,
        parked_is_estimate=not all_lines,
    )


def _workers(
    connection: Redis,
    space: Keyspace,
    records: list[tuple[str, dict[bytes, bytes]]],
    now: dt.datetime,
    current_jobs: bool,
) -> list[WorkerState]:
    """The live workers; with ``current_jobs``, one more round trip asks each job hash if it still runs
    (a worker record is refreshed only once per heartbeat)."""
    jobs: list[Any] = [[None, None]] * len(records)
    if current_jobs:
        with connection.pipeline(transaction=False) as pipe:
            for _, record in records:
                pipe.hmget(space.job(text(record.get(b"current_job"))), ["description", "status"])
            jobs = pipe.execute(raise_on_error=False)
    workers = []
    for (key, record), job in zip(records, jobs, strict=True):
        job_name, status = job if isinstance(job, list) else (None, None)
        workers.append(
            WorkerState(
                name=key.removeprefix(keys.WORKER_PREFIX),
                state=text(record.get(b"state")),
                hostname=text(record.get(b"hostname")),
                pid=text(record.get(b"pid")),
                queues=text(record.get(b"queues")),
                current_job=text(record.get(b"current_job")),
                heartbeat_age=age(record.get(b"last_heartbeat"), now),
                job_running=status == Status.STARTED.encode(),
                job_name=text(job_name),
                foreign=foreign_worker(record),
            )
        )
    return workers
