"""The queue overview: what is waiting, running and failing, read from Redis and the database.

Strictly read-only, and O(queues + workers), never O(jobs): LLEN, ZCARD, LINDEX 0 and a few HGETs per
queue, in three pipelined round trips per Redis server. It never calls RQ's registry methods, whose
cleanup (run by ``len(registry)``, ``get_job_ids()`` or ``count``, and by django-rq's dashboard on
every view) moves and fails jobs: looking at a dashboard must not change what it shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Q
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from redis import Redis
from redis.exceptions import RedisError

from . import registry, stats
from .connections import connection_identity, get_connection, queue_configs
from .models import DeadLetter, OutboxEntry
from .store import (
    DYING,
    LOST,
    Status,
    job_key,
    keys,
    parse_rq_timestamp,
    queue_key,
    scheduled_key,
    text,
    wip_key,
)

#: Scheduled jobs looked at per queue to tell retries (attempt > 0) from delayed jobs.
RETRY_SAMPLE = 200


@dataclass(frozen=True)
class QueueState:
    name: str
    depth: int
    oldest_age: float | None
    running: int
    scheduled: int
    retrying: int
    retrying_is_estimate: bool
    """True when the scheduled set is larger than the sample: ``retrying`` is then a lower bound."""


@dataclass(frozen=True)
class WorkerState:
    name: str
    hostname: str
    pid: str
    state: str
    queues: str
    job_id: str
    job_name: str
    heartbeat_age: float | None


@dataclass(frozen=True)
class JobTypeState:
    name: str
    stats: stats.JobStats
    dead_hour: int
    dead_day: int

    @property
    def chart(self) -> SafeString:
        return bars(self.stats.hourly)


@dataclass
class Overview:
    now: dt.datetime
    queues: list[QueueState] = field(default_factory=list)
    workers: list[WorkerState] = field(default_factory=list)
    jobs: list[JobTypeState] = field(default_factory=list)
    dying: int = 0
    lost: int = 0
    outbox: int = 0
    errors: list[str] = field(default_factory=list)


def _text(value: bytes | None) -> str:
    return text(value) if value is not None else ""


def _attempt(value: bytes | None) -> int:
    try:
        return int(float(value or 0))
    except (ValueError, OverflowError):
        return 0


def _age(stamp: bytes | None, now: dt.datetime) -> float | None:
    then = parse_rq_timestamp(stamp)
    if then is None:
        return None
    return max((now - then).total_seconds(), 0.0)


def _redis_part(connection: Redis, queues: Sequence[str], now: dt.datetime, into: Overview) -> None:
    """Queues, workers and the dying/lost sets of one Redis server, in three round trips."""
    with connection.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.llen(queue_key(queue))
            pipe.lindex(queue_key(queue), 0)
            pipe.zcard(wip_key(queue))
            pipe.zcard(scheduled_key(queue))
            pipe.zrange(scheduled_key(queue), 0, RETRY_SAMPLE - 1)
        pipe.smembers(keys.WORKERS_SET)
        pipe.zcard(DYING)
        pipe.zcard(LOST)
        first = pipe.execute()
    per_queue = [first[i : i + 5] for i in range(0, 5 * len(queues), 5)]
    worker_keys = sorted(_text(k) for k in first[-3])
    into.dying += first[-2]
    into.lost += first[-1]

    with connection.pipeline(transaction=False) as pipe:
        for _, oldest, _, _, sample in per_queue:
            pipe.hget(job_key(_text(oldest)), "enqueued_at")
            for job_id in sample:
                pipe.hget(job_key(_text(job_id)), "dj_attempt")
        for key in worker_keys:
            pipe.hgetall(key)
        second = iter(pipe.execute())
    for queue, (depth, oldest, running, scheduled, sample) in zip(queues, per_queue, strict=True):
        enqueued_at = next(second)
        retrying = sum(1 for _ in sample if _attempt(next(second)) > 0)
        into.queues.append(
            QueueState(
                name=queue,
                depth=depth,
                oldest_age=_age(enqueued_at, now) if oldest is not None else None,
                running=running,
                scheduled=scheduled,
                retrying=retrying,
                retrying_is_estimate=scheduled > len(sample),
            )
        )
    # A worker whose hash expired is dead, even if the set still names it: skip it, change nothing.
    workers = [(key, w) for key, w in zip(worker_keys, second, strict=True) if w]

    # A worker record is refreshed once per heartbeat; the job hash says whether its job still runs.
    with connection.pipeline(transaction=False) as pipe:
        for _, worker in workers:
            pipe.hmget(job_key(_text(worker.get(b"current_job"))), ["description", "status"])
        jobs = pipe.execute()
    for (key, worker), (job_name, status) in zip(workers, jobs, strict=True):
        running = status == Status.STARTED.encode()
        into.workers.append(
            WorkerState(
                name=key.removeprefix(keys.WORKER_PREFIX),
                hostname=_text(worker.get(b"hostname")),
                pid=_text(worker.get(b"pid")),
                state="busy" if running else "idle",
                queues=_text(worker.get(b"queues")),
                job_id=_text(worker.get(b"current_job")) if running else "",
                job_name=_text(job_name) if running else "",
                heartbeat_age=_age(worker.get(b"last_heartbeat"), now),
            )
        )


def _job_types(per_job: dict[str, stats.JobStats], now: dt.datetime) -> list[JobTypeState]:
    hour_ago, day_ago = now - dt.timedelta(hours=1), now - dt.timedelta(days=1)
    dead = {
        row["job_name"]: row
        for row in DeadLetter.objects.filter(created_at__gte=day_ago)
        .order_by()
        .values("job_name")
        .annotate(day=Count("pk"), hour=Count("pk", filter=Q(created_at__gte=hour_ago)))
    }
    names = {job.name for job in registry.all_jobs()} | set(per_job) | set(dead)
    rows = [
        JobTypeState(
            name=name,
            stats=per_job.get(name, stats.JobStats()),
            dead_hour=dead[name]["hour"] if name in dead else 0,
            dead_day=dead[name]["day"] if name in dead else 0,
        )
        for name in names
    ]
    # Trouble first, then the busy ones, then the idle ones by name.
    return sorted(rows, key=lambda r: (-r.dead_day - r.stats.day.failures, -r.stats.day.successes, r.name))


def snapshot(now: dt.datetime | None = None) -> Overview:
    """Everything the overview page shows. A Redis server that does not answer becomes an error
    line on the page, not a failed page: the overview matters most when something is down."""
    now = now or dt.datetime.now(dt.UTC)
    overview = Overview(now=now)
    by_server: dict[str, list[str]] = {}
    for queue in queue_configs():
        by_server.setdefault(connection_identity(queue), []).append(queue)
    per_job: dict[str, stats.JobStats] = {}
    for queues in by_server.values():
        try:
            connection = get_connection(queues[0])
            _redis_part(connection, queues, now, overview)
            stats.read(connection, now, per_job)
        except RedisError as exc:
            overview.errors.append(f"Redis for {', '.join(queues)} did not answer: {exc}")
    overview.outbox = OutboxEntry.objects.count()
    overview.jobs = _job_types(per_job, now)
    return overview


@dataclass(frozen=True)
class JobState:
    status: str
    queue: str
    attempt: int
    enqueued_at: str
    started_at: str
    ended_at: str
    due: dt.datetime | None
    """When a scheduled job (a retry, or a paced requeue) becomes due."""


def job_state(job_id: str, queue: str) -> JobState | None:
    """One job's hash as Redis holds it now; None once it has expired (``FINISHED_TTL`` after the end)."""
    with get_connection(queue).pipeline(transaction=False) as pipe:
        pipe.hmget(
            job_key(job_id), ["status", "origin", "dj_attempt", "enqueued_at", "started_at", "ended_at"]
        )
        pipe.zscore(scheduled_key(queue), job_id)
        (status, origin, attempt, enqueued, started, ended), due = pipe.execute()
    if status is None:
        return None
    return JobState(
        status=_text(status),
        queue=_text(origin),
        attempt=_attempt(attempt),
        enqueued_at=_text(enqueued),
        started_at=_text(started),
        ended_at=_text(ended),
        due=dt.datetime.fromtimestamp(due, dt.UTC) if due is not None else None,
    )


def bars(buckets: Sequence[stats.Tally], width: int = 6, height: int = 28) -> SafeString:
    """A small inline SVG bar chart, one bar per bucket: successes below, failures stacked on top."""
    peak = max((b.successes + b.failures for b in buckets), default=0) or 1
    rects = []
    for index, bucket in enumerate(buckets):
        ok, bad = bucket.successes * height / peak, bucket.failures * height / peak
        ago = len(buckets) - 1 - index
        label = f"{f'{ago} h ago' if ago else 'this hour'}: {bucket.successes} ok, {bucket.failures} failed"
        x = index * width
        rects.append((x, f"{height - ok:.1f}", width - 1, f"{ok:.1f}", "djjobs-ok", label))
        rects.append((x, f"{height - ok - bad:.1f}", width - 1, f"{bad:.1f}", "djjobs-failed", label))
    body = format_html_join(
        "",
        '<rect x="{}" y="{}" width="{}" height="{}" class="{}"><title>{}</title></rect>',
        rects,
    )
    return format_html(
        '<svg class="djjobs-chart" width="{}" height="{}" viewBox="0 0 {} {}" role="img" '
        'aria-label="successes and failures per hour, last 24 hours">{}</svg>',
        width * len(buckets),
        height,
        width * len(buckets),
        height,
        body,
    )
