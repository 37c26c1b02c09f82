"""Periodic jobs that fire exactly once per period, however many ``runjobs`` schedule them.

Every ``runjobs`` runs the scheduler (one per Redis server it serves, for the jobs whose queue lives
there). A period fires only if its scheduler takes the Redis lock ``djjobs:cron:<name>:<period>`` (on
the server of the job's queue) and then inserts the ``CronRun`` row unique on (name, period), in
the same transaction as the job's outbox row. The lock keeps the schedulers from racing; the row
is the guard that survives a Redis failover that loses the lock.

Schedules are cron expressions (five fields, or six with seconds last) in ``settings.TIME_ZONE``.
``JOBS["CRON"]`` maps a job name to an expression (to schedule or reschedule it) or to None (to
disable it).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from croniter import croniter
from django.db import IntegrityError, transaction
from django.db.models import Count, QuerySet
from django.utils import timezone
from redis import Redis

from django_jobs.client.enqueue import Options, enqueue_calls
from django_jobs.conf import jobs_settings
from django_jobs.core import registry
from django_jobs.core.outcomes import AttemptEnded, Outcome
from django_jobs.models import CronRun
from django_jobs.store import keys
from django_jobs.store.lifecycle import F

logger = logging.getLogger("django_jobs.cron")

CATCH_UP = ("skip", "once")


@dataclass(frozen=True)
class Schedule:
    job: registry.Job[Any, Any]
    expression: str
    catch_up: str

    def period(self, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
        """The start of the period ``now`` is in, and the start of the next one."""
        start = croniter(self.expression, now).get_prev(dt.datetime)
        return start, croniter(self.expression, start).get_next(dt.datetime)


def schedules() -> list[Schedule]:
    """Every enabled schedule: each ``@job(cron=...)``, overridden by ``JOBS["CRON"]``."""
    overrides = jobs_settings.CRON
    found = []
    for definition in registry.all_jobs():
        expression = overrides.get(definition.name, definition.cron)
        if expression:
            found.append(Schedule(definition, expression, definition.cron_catch_up))
    return found


# Release a period's lock, if this scheduler still holds it. KEYS[1]: the lock; ARGV[1]: its token.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class Scheduler:
    """One ``runjobs``' view of the schedules; it remembers the periods it has seen to, nothing more.

    A period whose firing failed (database or Redis down) is not marked seen: it is fired on a
    later tick, at most every ``RETRY_SECONDS``, and each failure is logged at ERROR.
    """

    RETRY_SECONDS = 5.0

    def __init__(self, connection: Redis, owns: Callable[[str], bool] | None = None) -> None:
        """``owns(queue)``: whether this scheduler fires the jobs of ``queue`` (default: every queue).
        ``runjobs`` gives each Redis server its scheduler, for the jobs whose queue lives there, so a
        period's lock is on the server its job goes to."""
        self.connection = connection
        self.owns = owns
        self.seen: dict[str, dt.datetime] = {}
        self.retry_at: dict[str, float] = {}  # job name -> monotonic time its failed period is retried
        self.token = f"{os.getpid()}:{uuid.uuid4().hex}"
        self._release = connection.register_script(_RELEASE)

    def tick(self, now: dt.datetime | None = None) -> int:
        """Fire every period that is due and not fired yet; returns how many this call fired."""
        now = now or timezone.localtime()
        fired = 0
        for schedule in schedules():
            if self.owns is not None and not self.owns(schedule.job.queue):
                continue
            name = schedule.job.name
            start, end = schedule.period(now)
            if self.seen.get(name) == start or self.retry_at.get(name, 0.0) > time.monotonic():
                continue
            # "skip": a period that started over a minute ago (no scheduler was up) is not run late.
            late = (now - start).total_seconds() > min(60.0, (end - start).total_seconds())
            if not (schedule.catch_up == "skip" and late):
                try:
                    fired += self._fire(schedule, start, end)
                except Exception:
                    self.retry_at[name] = time.monotonic() + self.RETRY_SECONDS
                    logger.exception(
                        "Could not fire %s for the period starting %s; retrying in %g s.",
                        name,
                        start.isoformat(),
                        self.RETRY_SECONDS,
                    )
                    continue
            self.seen[name] = start
            self.retry_at.pop(name, None)
        return fired

    def _fire(self, schedule: Schedule, start: dt.datetime, deadline: dt.datetime) -> int:
        """Take the period's lock (or find it already ours from a failed try), then write the run.

        If the database part fails the lock is released, so this or another scheduler fires the
        period later; the ``CronRun`` row, unique per period, is what stops a double fire.
        """
        name = schedule.job.name
        lock = keys.cron_lock(name, start)
        ttl = max(60, math.ceil(2 * (deadline - start).total_seconds()))
        if not self.connection.set(lock, self.token, nx=True, ex=ttl) and self.connection.get(lock) != (
            self.token.encode()
        ):
            return 0
        try:
            with transaction.atomic():
                run = CronRun.objects.create(name=name, scheduled_for=start, deadline=deadline)
                handle = enqueue_calls(schedule.job, [((), {})], options=Options(cron_run=run.pk))[0]
                CronRun.objects.filter(pk=run.pk).update(job_id=handle.id)
        except Exception as exc:
            if (
                isinstance(exc, IntegrityError)
                and CronRun.objects.filter(name=name, scheduled_for=start).exists()
            ):
                return 0  # fired already: the Redis lock was lost (failover) but the row was not
            self._release(keys=[lock], args=[self.token])
            raise
        logger.info("Fired %s for the period starting %s", name, start.isoformat())
        return 1


#: CronRun ids are positive 64-bit integers; anything else in ``dj_cron`` names no run.
_MAX_ID = 2**63 - 1


def finished(fields: dict[str, bytes]) -> None:
    """Mark a periodic job's run finished (called when a job carrying ``dj_cron`` succeeds).

    ``dj_cron`` comes from Redis: a value that is not a run id is logged and ignored (the job did
    succeed; only its period shows as overdue)."""
    raw = fields.get(F.CRON)
    if raw is None:
        return
    try:
        run = int(raw)
    except (TypeError, ValueError):
        run = 0
    if not 0 < run <= _MAX_ID:
        logger.warning("Ignoring dj_cron %r: not the id of a periodic run", raw[:100])
        return
    CronRun.objects.filter(pk=run, finished_at__isnull=True).update(finished_at=timezone.now())


def on_attempt_ended(event: AttemptEnded) -> None:
    """Outcome subscriber: a periodic job's success finishes its run. A garbage ``dj_cron`` or a
    database error leaves the job succeeded; its period shows as overdue."""
    if event.outcome is Outcome.SUCCESS:
        finished(event.claimed.fields)


def _overdue(now: dt.datetime | None) -> QuerySet[CronRun]:
    return CronRun.objects.filter(finished_at__isnull=True, deadline__lt=now or timezone.now())


def overdue(now: dt.datetime | None = None) -> int:
    """Periods whose run has not finished by its deadline (the next period's start)."""
    return _overdue(now).count()


def overdue_by_job(now: dt.datetime | None = None) -> dict[str, int]:
    """:func:`overdue`, per job name: one indexed aggregate."""
    rows = _overdue(now).order_by().values("name").annotate(n=Count("pk"))
    return {row["name"]: row["n"] for row in rows}
