"""The queue overview: what is waiting, running and failing, from the read model and the database.

Redis is read by :mod:`django_jobs.ops.inspection` (strictly read-only, O(queues + workers)); this module
adds the per-job statistics and dead letters and shapes what the page shows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db.models import Count, Q
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from redis.exceptions import RedisError

from django_jobs.core import registry
from django_jobs.core.connections import queue_configs
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.ops import inspection
from django_jobs.store import Pause, valid_job_id
from django_jobs.telemetry import stats

#: Scheduled jobs looked at per queue to tell retries (attempt > 0) from delayed jobs.
RETRY_SAMPLE = 200


@dataclass(frozen=True)
class JobTypeState:
    name: str
    stats: stats.JobStats
    dead_hour: int
    dead_day: int
    paused: Pause | None = None
    held: int = 0
    """Its jobs parked while it is paused, on every server."""

    @property
    def chart(self) -> SafeString:
        return bars(self.stats.hourly)


@dataclass(frozen=True)
class Worker:
    """A worker as the overview shows it: busy only while the job hash says its job still runs."""

    name: str
    hostname: str
    pid: str
    state: str
    queues: str
    job_id: str
    job_name: str
    heartbeat_age: float | None


@dataclass
class Overview:
    now: dt.datetime
    queues: list[inspection.QueueState] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    jobs: list[JobTypeState] = field(default_factory=list)
    dying: int = 0
    lost: int = 0
    outbox: int = 0
    errors: list[str] = field(default_factory=list)
    pauses: list[Pause] = field(default_factory=list)
    """What is paused, queues then job types, each once."""
    held: dict[str, int] = field(default_factory=dict)
    """Parked jobs per job type, on every server."""

    @property
    def paused(self) -> list[tuple[Pause, int]]:
        """Each pause with the jobs it holds: a queue's waiting and parked jobs, a job type's parked ones."""
        queues = {queue.name: queue.depth + queue.held for queue in self.queues}
        return [
            (p, queues.get(p.name, 0) if p.kind == "queue" else self.held.get(p.name, 0)) for p in self.pauses
        ]


def _add(overview: Overview, server: inspection.ServerState) -> None:
    overview.queues += server.queues
    overview.workers += [
        Worker(
            name=worker.name,
            hostname=worker.hostname,
            pid=worker.pid,
            state="busy" if worker.job_running else "idle",
            queues=worker.queues,
            job_id=worker.current_job if worker.job_running and valid_job_id(worker.current_job) else "",
            job_name=worker.job_name if worker.job_running else "",
            heartbeat_age=worker.heartbeat_age,
        )
        for worker in server.workers
    ]
    overview.dying += server.dying
    overview.lost += server.lost
    known = {(p.kind, p.name) for p in overview.pauses}
    overview.pauses += [p for p in server.pauses if (p.kind, p.name) not in known]
    for name, count in server.held.items():
        overview.held[name] = overview.held.get(name, 0) + count


def _job_types(
    overview: Overview, per_job: dict[str, stats.JobStats], now: dt.datetime
) -> list[JobTypeState]:
    hour_ago, day_ago = now - dt.timedelta(hours=1), now - dt.timedelta(days=1)
    dead = {
        row["job_name"]: row
        for row in DeadLetter.objects.filter(created_at__gte=day_ago)
        .order_by()
        .values("job_name")
        .annotate(day=Count("pk"), hour=Count("pk", filter=Q(created_at__gte=hour_ago)))
    }
    paused = {p.name: p for p in overview.pauses if p.kind == "job"}
    names = {job.name for job in registry.all_jobs()} | set(per_job) | set(dead) | set(paused)
    rows = [
        JobTypeState(
            name=name,
            stats=per_job.get(name, stats.JobStats()),
            dead_hour=dead[name]["hour"] if name in dead else 0,
            dead_day=dead[name]["day"] if name in dead else 0,
            paused=paused.get(name),
            held=overview.held.get(name, 0),
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
    per_job: dict[str, stats.JobStats] = {}
    for queues, connection, state in inspection.read_all(
        list(queue_configs()), now, retry_sample=RETRY_SAMPLE, current_jobs=True
    ):
        try:
            if isinstance(state, RedisError):
                raise state
            _add(overview, state)
            stats.read(connection, now, per_job)
        except RedisError as exc:
            overview.errors.append(f"Redis for {', '.join(queues)} did not answer: {exc}")
    overview.outbox = OutboxEntry.objects.count()
    overview.pauses.sort(key=lambda p: (p.kind != "queue", p.name))
    overview.jobs = _job_types(overview, per_job, now)
    return overview


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
