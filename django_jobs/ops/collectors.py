"""Queue, dead-letter, outbox and worker gauges, served by the web side's ``/metrics``.

They are read at scrape time from :mod:`django_jobs.ops.inspection`: per Redis server every queue's depth,
oldest ready job's enqueue time (the heads of its list and of each priority), scheduled count and
jobs parked over their key's limit, what is paused and since when, and every worker's state
(O(queues + workers), never a walk over queued jobs); the database answers one aggregate over the
dead letters (by job, status and reason), one per outbox and a count of the open batches. A source
that does not answer is left out of that scrape (and logged), never an error for the whole page.

django-prometheus's ``/metrics`` serves prometheus_client's default registry, which
:func:`register` adds the collector to. Under ``PROMETHEUS_MULTIPROC_DIR`` that view builds a
fresh registry instead: route ``metrics`` to :func:`metrics_view` there.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence

from django.db import DatabaseError, connections, router
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core.connections import queue_configs
from django_jobs.models import Batch, DeadLetter, OutboxEntry
from django_jobs.ops import durability, inspection
from django_jobs.store import Pause
from django_jobs.telemetry import metrics
from django_jobs.workflows import cron

logger = logging.getLogger("django_jobs.metrics")


def _queue_gauges(gauges: list[GaugeMetricFamily], queues: Iterable[inspection.QueueState]) -> None:
    """Each queue's depth, oldest ready job's age (when its head says), scheduled and parked jobs."""
    depth, age, scheduled, parked = gauges
    for queue in queues:
        depth.add_metric([queue.name], queue.depth)
        scheduled.add_metric([queue.name], queue.scheduled)
        parked.add_metric([queue.name], queue.parked)
        if queue.depth == 0 or queue.oldest_age is not None:
            age.add_metric([queue.name], queue.oldest_age or 0.0)


class JobsCollector:
    """The gauges; each scrape reads them afresh."""

    def describe(self) -> Iterable[Metric]:
        """Names only: registering must not touch Redis or the database."""
        return self._families()

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        dead, pending, outbox_age, workers, overdue, quarantined, batches = families[4:]
        found: dict[str, str] = {}  # worker -> state: one serving two servers is on both, busy on one
        names: list[str] = []
        pauses: list[Pause] = []
        answered = True
        for server_queues, _, server in inspection.read_all(sorted(queue_configs())):
            if isinstance(server, RedisError):
                answered = False
                logger.warning(
                    "Gauges of queue(s) %s left out of this scrape: Redis did not answer (%s)",
                    ", ".join(server_queues),
                    server,
                )
                continue
            _queue_gauges(families[:4], server.queues)
            for worker in server.workers:
                if worker.state and found.get(worker.name) != "busy":
                    found[worker.name] = worker.state
            names += [queue.name for queue in server.queues]
            pauses += server.pauses
        if answered:  # a partial count would read as workers gone
            states = Counter({"busy": 0, "idle": 0})
            states.update(found.values())
            for state, count in sorted(states.items()):
                workers.add_metric([state], count)
        families += metrics.pause_families(names, pauses, time.time())
        try:
            by_job, by_reason = dead_letter_counts()
            for (job, status), count in sorted(by_job.items()):
                dead.add_metric([job, status], count)
            for reason, count in by_reason.items():
                quarantined.add_metric([reason], count)
            count, oldest = _outbox()
            pending.add_metric([], count)
            outbox_age.add_metric([], (timezone.now() - oldest).total_seconds() if oldest else 0.0)
            for name, count in cron.overdue_by_job().items():
                overdue.add_metric([name], count)
            batches.add_metric([], Batch.objects.filter(status=Batch.Status.OPEN).count())
        except DatabaseError as exc:
            logger.warning("Dead-letter and outbox gauges left out of this scrape: %s", exc)
        return [*families, *durability_families()]

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                "django_jobs_queue_depth", "Jobs ready to run, waiting in the queue.", labels=["queue"]
            ),
            GaugeMetricFamily(
                "django_jobs_queue_oldest_job_age_seconds",
                "Seconds the oldest ready job of the queue has waited since it was enqueued (0 when empty).",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "django_jobs_scheduled_jobs",
                "Jobs waiting for their due time: retries in backoff and delayed jobs.",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "django_jobs_parked_jobs",
                "Jobs waiting for a slot of their key (limit_key), parked until one of its jobs ends.",
                labels=["queue"],
            ),
            GaugeMetricFamily(
                "django_jobs_dead_letters", "Dead letters by job and status.", labels=["job", "status"]
            ),
            GaugeMetricFamily("django_jobs_outbox_pending", "Outbox rows not yet relayed and pruned."),
            GaugeMetricFamily(
                "django_jobs_outbox_oldest_age_seconds", "Age of the oldest outbox row (0 when empty)."
            ),
            GaugeMetricFamily(
                "django_jobs_workers", "Live worker processes by state (busy, idle).", labels=["state"]
            ),
            GaugeMetricFamily(
                "django_jobs_cron_overdue",
                "Periods of a periodic job whose run has not finished by its deadline (the next period).",
                labels=["job"],
            ),
            GaugeMetricFamily(
                "django_jobs_quarantined_items",
                "Open dead letters of items no job ran for: unreadable (quarantined by a worker loop) and "
                "vanished (the job's hash was gone from Redis, e.g. evicted).",
                labels=["reason"],
            ),
            GaugeMetricFamily(
                "django_jobs_batches_open", "Batches with a member that has not ended: their callbacks wait."
            ),
        ]


def durability_families() -> list[GaugeMetricFamily]:
    """Each queue's level, its ledger rows, and its Redis' replicas, lag and last primary change."""
    level = GaugeMetricFamily(
        "django_jobs_queue_durability", "1 for the durability level of each queue.", labels=["queue", "level"]
    )
    pending = GaugeMetricFamily(
        "django_jobs_ledger_pending", "Ledger rows whose job has not finished yet.", labels=["queue"]
    )
    oldest = GaugeMetricFamily(
        "django_jobs_ledger_oldest_age_seconds",
        "Seconds since the oldest pending ledger row's job was due (0 when none is).",
        labels=["queue"],
    )
    replicas, lag, changed = _replication_families()
    for queue in sorted(queue_configs()):
        level.add_metric([queue, jobs_settings.durability(queue)], 1)
    try:
        for state in durability.ledger():
            pending.add_metric([state.queue], state.pending)
            oldest.add_metric([state.queue], state.oldest_age)
    except DatabaseError as exc:
        logger.warning("Ledger gauges left out of this scrape: %s", exc)
    for names, primary in durability.replication(sorted(queue_configs())):
        if isinstance(primary, RedisError):
            logger.warning("Replication gauges of %s left out of this scrape: %s", ", ".join(names), primary)
            continue
        for queue in names:
            replicas.add_metric([queue], primary.replicas)
            if primary.lag is not None:
                lag.add_metric([queue], primary.lag)
            if primary.changed_at is not None:
                changed.add_metric([queue], primary.changed_at)
    return [level, pending, oldest, replicas, lag, changed]


def _replication_families() -> list[GaugeMetricFamily]:
    return [
        GaugeMetricFamily(
            "django_jobs_redis_replicas", "Replicas connected to the queue's Redis primary.", labels=["queue"]
        ),
        GaugeMetricFamily(
            "django_jobs_redis_replica_lag_seconds",
            "Seconds since the slowest replica of the queue's Redis last acknowledged the stream.",
            labels=["queue"],
        ),
        GaugeMetricFamily(
            "django_jobs_redis_primary_changed_timestamp_seconds",
            "When runjobs last saw the queue's Redis primary change (failover or restart), Unix time.",
            labels=["queue"],
        ),
    ]


#: Dead-letter reasons that mean an item was set aside unrun, not that a job failed.
QUARANTINE_REASONS = (DeadLetter.Reason.UNREADABLE, DeadLetter.Reason.VANISHED)


def dead_letter_counts() -> tuple[Counter[tuple[str, str]], dict[str, int]]:
    """Dead letters by (job, status), and open ones by quarantine reason (0 included): one aggregate."""
    by_job: Counter[tuple[str, str]] = Counter()
    by_reason = dict.fromkeys((reason.value for reason in QUARANTINE_REASONS), 0)
    rows = DeadLetter.objects.order_by().values("job_name", "status", "reason").annotate(n=Count("pk"))
    for row in rows:
        by_job[row["job_name"], row["status"]] += row["n"]
        if row["status"] == DeadLetter.Status.OPEN and row["reason"] in by_reason:
            by_reason[row["reason"]] += row["n"]
    return by_job, by_reason


def open_dead_letters(queues: Sequence[str]) -> list[tuple[str, int, dt.datetime]]:
    """Open dead letters of ``queues`` per job name: how many, and when the oldest was written; the
    job names with the most first. One aggregate."""
    rows = (
        DeadLetter.objects.filter(status=DeadLetter.Status.OPEN, queue__in=list(queues))
        .order_by()
        .values("job_name")
        .annotate(n=Count("pk"), oldest=Min("created_at"))
    )
    return sorted(((row["job_name"], row["n"], row["oldest"]) for row in rows), key=lambda r: (-r[1], r[0]))


def _outbox() -> tuple[int, dt.datetime | None]:
    """Rows in the outbox of every database that has one (ledger rows apart: they wait for their
    job to finish, see the ledger gauges), and the oldest row's creation time."""
    count, oldest = 0, None
    ledger = durability.ledger_queues()
    for alias in connections:
        if router.allow_migrate_model(alias, OutboxEntry):
            rows = OutboxEntry.objects.using(alias).exclude(queue__in=ledger)
            row = rows.aggregate(n=Count("pk"), oldest=Min("created_at"))
            count += row["n"]
            if row["oldest"] is not None and (oldest is None or row["oldest"] < oldest):
                oldest = row["oldest"]
    return count, oldest


COLLECTOR = JobsCollector()
_registries: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def register(registry: CollectorRegistry = REGISTRY) -> None:
    """Add the gauges to ``registry`` (the default one is what django-prometheus serves); once."""
    if registry not in _registries:
        registry.register(COLLECTOR)
        _registries.add(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """django-prometheus's ``/metrics`` for a multi-process web server, with the gauges added."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    registry.register(COLLECTOR)
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
