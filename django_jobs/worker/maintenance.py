"""The supervisor's periodic duties: promote due jobs, reap dead workers' leases, finish
interrupted dead-lettering, relay the outbox and prune old idempotency keys.

Every ``runjobs`` runs all of them, so no duty waits on one elected process, and each step is
an atomic script or an idempotent write, so two ``runjobs`` doing the same step cannot double it.
Each item is handled on its own: one bad item is logged and skipped, never fatal.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from django.db import DatabaseError, connections, router
from django.utils import timezone
from redis.exceptions import RedisError, ResponseError

from .. import alerts, deadletter, execution, idempotency, metrics, stats
from ..conf import jobs_settings
from ..cron import Scheduler
from ..enqueue import Envelope, push
from ..exceptions import WorkerLost
from ..models import DeadLetter, OutboxEntry
from ..store import Claimed, Store, Vanished, split_token

logger = logging.getLogger("django_jobs.worker")


def _guarded(what: str, action: Callable[[], object]) -> None:
    """Run one duty or item; a failure is logged and retried next time, never fatal."""
    try:
        action()
    except (RedisError, DatabaseError) as exc:
        logger.warning("%s skipped (%s); will retry.", what, exc)
    except Exception:
        logger.exception("%s failed", what)


class Every:
    """Runs a duty at most once per ``seconds``."""

    def __init__(self, seconds: float, duty: Callable[[], object]) -> None:
        self.seconds, self.duty, self.next = seconds, duty, 0.0

    def __call__(self, now: float) -> None:
        if now >= self.next:
            self.next = now + self.seconds
            _guarded(getattr(self.duty, "__name__", "duty"), self.duty)


def _text(fields: dict[str, bytes], name: str, default: str) -> str:
    value = fields.get(name)
    return default if value is None else value.decode(errors="replace")


class Maintenance:
    def __init__(self, store: Store, queues: Sequence[str], interval: float) -> None:
        self.store, self.queues = store, list(queues)
        self.scheduler = Scheduler(store.connection)
        self.duties = [
            Every(interval, self.promote_and_reap),
            Every(1.0, self.relay_outbox),
            Every(5.0, self.finish_dying),
            Every(5.0, self.record_vanished),
            Every(600.0, self.prune_keys),
            Every(5.0, self.flush_alerts),
            Every(min(interval, 0.2), self.scheduler.tick),
        ]

    def tick(self) -> None:
        now = time.monotonic()
        for duty in self.duties:
            duty(now)
        stats.flush(self.store.connection)

    def promote_and_reap(self) -> None:
        self.store.maintain(self.queues)
        for token in self.store.lost_tokens():
            _guarded(f"settling {token}", partial(self._settle_lost, token))

    def _settle_lost(self, token: str) -> None:
        job_id = split_token(token)
        fields = self._fields(job_id)
        queue = fields.get("origin", b"").decode(errors="replace")
        if queue not in self.queues:
            return  # another runjobs, with that queue's jobs registered, settles it
        claimed = Claimed(queue, job_id, token, fields)
        outcome = execution.settle_failure(
            store=self.store, claimed=claimed, lost=True, exc=WorkerLost("The worker running this job died.")
        )
        name = fields.get("description", b"").decode(errors="replace")
        metrics.settled(name, queue, outcome.value)
        stats.record(name, outcome.value)
        execution.log_outcome(outcome, name, claimed, 0.0)

    def _fields(self, job_id: str) -> dict[str, bytes]:
        try:
            return self.store.job_fields(job_id)
        except ResponseError as exc:  # not a hash: keep what Redis says about it
            return {"origin": b"", "redis_error": str(exc).encode()}

    def finish_dying(self) -> None:
        """Write the rows of dead jobs whose worker died (or whose DB was down) before writing them."""
        # Past three leases, whoever was writing the row is gone (or the database was down).
        for job_id in self.store.dying(older_than=3 * jobs_settings.LEASE_SECONDS):
            _guarded(f"dead-lettering {job_id}", partial(self._bury, job_id))

    def _bury(self, job_id: str) -> None:
        fields = self._fields(job_id)
        queue = _text(fields, "origin", "")
        try:
            history = json.loads(fields.get("dj_history", b"[]"))
        except ValueError:
            history = []
        failure = deadletter.Failure(
            job_id=job_id,
            queue=queue,
            reason=_text(fields, "dj_reason", DeadLetter.Reason.UNDECODABLE.value),
            exception=_text(fields, "dj_exception", "django_jobs.exceptions.PayloadError"),
            message=_text(fields, "dj_message", "The job hash in Redis is not a django_jobs job."),
            traceback=_text(fields, "exc_info", ""),
            history=history if isinstance(history, list) else [],
        )
        deadletter.bury(self.store, failure, fields)

    def record_vanished(self) -> None:
        """Dead-letter the ids a claim popped after their hash was gone, so no eviction is silent."""
        for item in self.store.vanished():
            _guarded(f"recording vanished job {item.id}", partial(self._record_vanished, item))

    def _record_vanished(self, item: Vanished) -> None:
        message = (
            f"The job's id was taken from queue {item.queue!r} but its hash was gone from Redis "
            "(evicted under maxmemory, or deleted), so nothing ran and its payload is lost."
        )
        deadletter.record(
            deadletter.Failure(item.id[:64], item.queue, DeadLetter.Reason.VANISHED, "JobVanished", message),
            {},
        )
        if self.store.forget_vanished(item):  # counted and logged once, by whoever removed it
            metrics.vanished(item.queue)
            logger.warning(
                "Job %s vanished from queue %s: %s Recorded as a dead letter.", item.id, item.queue, message
            )

    def relay_outbox(self, batch: int = 500) -> None:
        """Push outbox rows the on-commit push missed, and prune rows already delivered."""
        cutoff = timezone.now() - dt.timedelta(seconds=1)  # leave fresh rows to their on-commit push
        for alias in connections:
            if not router.allow_migrate_model(alias, OutboxEntry):
                continue
            rows = list(
                OutboxEntry.objects.using(alias).filter(created_at__lt=cutoff).order_by("created_at")[:batch]
            )
            if not rows:
                continue
            already = push([Envelope.from_row(row) for row in rows])
            OutboxEntry.objects.using(alias).filter(pk__in=[row.pk for row in rows]).delete()
            if len(rows) > len(already):
                logger.info("Outbox relay pushed %d job(s)", len(rows) - len(already))

    def prune_keys(self) -> None:
        idempotency.prune()

    def flush_alerts(self) -> None:
        """Send the summary of each dead-letter group whose alert window closed."""
        alerts.flush(self.store.connection)
