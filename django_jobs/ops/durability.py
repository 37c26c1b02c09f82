"""The durability read model: each queue's level, its ledger rows, and its Redis' replication state,
for the gauges and ``jobs_health``. One aggregate query per outbox and one ``INFO`` per Redis server.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Count, Min, Q
from django.utils import timezone
from redis.exceptions import RedisError

from django_jobs.conf import LEDGER, jobs_settings
from django_jobs.core.connections import queue_configs, server_stores
from django_jobs.models import OutboxEntry, outbox_aliases
from django_jobs.store.replication import Primary, read_primary


def ledger_queues() -> list[str]:
    """The queues of ``RQ_QUEUES`` whose jobs keep a ledger row until they have finished."""
    return [queue for queue in queue_configs() if jobs_settings.durability(queue) == LEDGER]


@dataclass(frozen=True)
class LedgerState:
    """The ledger rows of one queue: how many, and how long the oldest due one has waited."""

    queue: str
    pending: int
    oldest_age: float  # seconds since the oldest row's job was due (0 when none is)


def ledger() -> list[LedgerState]:
    """Per ledger queue, its pending rows and the age of the oldest one already due (a job delayed by
    ``enqueue_in`` counts from its due time, so only work that should have run ages)."""
    queues = ledger_queues()
    now = timezone.now()
    counts = dict.fromkeys(queues, 0)
    oldest: dict[str, dt.datetime] = {}
    for alias in outbox_aliases():
        due = Q(due__lte=time.time())
        rows = OutboxEntry.objects.using(alias).filter(queue__in=queues).order_by().values("queue")
        for row in rows.annotate(n=Count("pk"), oldest=Min("created_at", filter=due)):
            counts[row["queue"]] += row["n"]
            if row["oldest"] is not None and row["oldest"] < oldest.get(row["queue"], now):
                oldest[row["queue"]] = row["oldest"]
    return [
        LedgerState(queue, counts[queue], (now - oldest[queue]).total_seconds() if queue in oldest else 0.0)
        for queue in queues
    ]


def replication(queues: Sequence[str]) -> list[tuple[list[str], Primary | RedisError]]:
    """Each Redis server's primary state, with the queues on it; the error of one that is down."""
    found: list[tuple[list[str], Primary | RedisError]] = []
    for names, store in server_stores(queues):
        try:
            found.append((names, read_primary(store)))
        except RedisError as exc:
            found.append((names, exc))
    return found
