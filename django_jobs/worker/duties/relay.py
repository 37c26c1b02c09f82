"""The outbox relay: push the outbox rows their on-commit push missed (Redis down, a process killed
between COMMIT and the push), and prune rows already delivered. A row that can never be pushed, or
fails the same way twice, becomes a dead letter; a Redis that is down holds back only its own rows.

A row of a "replicated" queue that replicas have not confirmed is pushed once to each primary
(``pushed_to`` names it): again only after a failover or a restart, never every pass, so a job that
ran and whose hash expired is not created anew. One ``WAIT`` per pass, and only while enough replicas
are connected, confirms the rows pushed so far; the supervisor deletes a row once its job starts."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from functools import partial

from django.db import connections, router
from django.utils import timezone
from redis.exceptions import RedisError

from django_jobs.client import outbox
from django_jobs.client.backends import redis as redis_backend
from django_jobs.conf import LEDGER, REPLICATED, jobs_settings
from django_jobs.core.connections import (
    connection_identity,
    queue_configs,
    queues_on,
    store_of,
)
from django_jobs.core.envelope import Envelope
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.ops.durability import ledger_queues
from django_jobs.store import to_bytes
from django_jobs.store.lifecycle import F
from django_jobs.store.replication import Primary, confirm, read_primary
from django_jobs.worker.duties.base import Duty, Scope, exc_path, guarded, transient

logger = logging.getLogger("django_jobs.worker")

#: Seconds the relay leaves a queue alone after its Redis failed to answer.
RELAY_PAUSE = 3.0
#: Seconds between two warnings that rows of "replicated" queues wait for replicas.
UNCONFIRMED_WARN_EVERY = 60.0
#: Rows one confirmation (one ``WAIT``) deletes at most.
CONFIRM_BATCH = 5000


class Relay(Duty):
    name = "relay_outbox"
    every = 1.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.paused: dict[str, float] = {}  # queue -> when (monotonic) the relay tries its Redis again
        self.primary: Primary | None = None  # this server, read each pass it has "replicated" queues
        self.warned_at = -UNCONFIRMED_WARN_EVERY  # monotonic: the last warning of unconfirmed rows

    def run(self, batch: int = 500) -> None:
        """Push outbox rows the on-commit push missed, prune rows already delivered, and confirm the
        rows of "replicated" queues pushed so far."""
        cutoff = timezone.now() - dt.timedelta(seconds=1)  # leave fresh rows to their on-commit push
        replicated = self._replicated()
        self.primary = self._read_primary() if replicated else None
        for alias in connections:
            if router.allow_migrate_model(alias, OutboxEntry):
                guarded(f"relaying the outbox of {alias}", partial(self._relay, alias, cutoff, batch))
                if self.primary is not None:
                    guarded(f"confirming the outbox of {alias}", partial(self._confirm, alias, replicated))

    def _read_primary(self) -> Primary | None:
        """This server's identity; None while it does not answer (its pushes fail and pause it)."""
        try:
            return read_primary(self.scope.store)
        except RedisError:
            return None

    def _replicated(self) -> list[str]:
        """This server's queues of the "replicated" level."""
        return [q for q in queues_on(self.scope.queues[0]) if jobs_settings.durability(q) == REPLICATED]

    def _relay(self, alias: str, cutoff: dt.datetime, batch: int) -> None:
        """The oldest rows of this server's queues (and, for the lead, of unknown ones) whose Redis is
        not paused; learning of a Redis down, look again.

        Rows of ledger queues are the ledger's: it pushes them when their job is missing from Redis.
        Rows of replicated queues already pushed to this primary are not read again."""
        now = time.monotonic()
        skipped = {queue for queue, until in self.paused.items() if until > now} | set(ledger_queues())
        mine = queues_on(self.scope.queues[0])
        # Rows of another server's queues are its maintenance's; the lead also takes unknown queues'.
        ours = OutboxEntry.objects.using(alias).filter(created_at__lt=cutoff)
        if self.scope.lead:
            ours = ours.exclude(queue__in=[queue for queue in queue_configs() if queue not in mine])
        else:
            ours = ours.filter(queue__in=mine)
        if self.primary is not None:
            ours = ours.exclude(queue__in=self._replicated(), pushed_to=self.primary.run_id)
        while True:
            rows = list(ours.exclude(queue__in=skipped).order_by("created_at")[:batch])
            paused = self.relay_rows(alias, rows) if rows else set()
            if not paused:
                return
            skipped |= paused  # grows every round, so the loop ends

    def relay_rows(self, alias: str, rows: list[OutboxEntry]) -> set[str]:
        """Push rows grouped by Redis connection; returns the queues whose Redis was down (now paused)."""
        groups: dict[str, list[tuple[OutboxEntry, Envelope]]] = {}
        for row in rows:
            try:  # an unknown queue, broken options, an id that breaks the rule: never pushable
                envelope = outbox.envelope(row)
                groups.setdefault(connection_identity(row.queue), []).append((row, envelope))
            except Exception as exc:
                self._quarantine_row_guarded(alias, row, exc)
        return set().union(*(self._relay_group(alias, group) for group in groups.values()))

    def _confirm(self, alias: str, queues: list[str]) -> None:
        """Delete the rows of ``queues`` pushed to this primary once enough replicas have every write
        made before: one ``WAIT``, and none while too few replicas are connected for it to succeed."""
        assert self.primary is not None
        rows = OutboxEntry.objects.using(alias).filter(queue__in=queues, pushed_to=self.primary.run_id)
        ids = list(rows.values_list("id", flat=True)[:CONFIRM_BATCH])
        if not ids:
            return
        wanted = jobs_settings.REPLICAS
        if self.primary.replicas < wanted:
            self._warn_unconfirmed(alias, rows.count(), wanted)
            return
        if confirm(self.scope.store, wanted, jobs_settings.REPLICA_TIMEOUT) >= wanted:
            for start in range(0, len(ids), 900):  # under SQLite's older 999-parameter limit
                OutboxEntry.objects.using(alias).filter(pk__in=ids[start : start + 900]).delete()

    def _warn_unconfirmed(self, alias: str, count: int, wanted: int) -> None:
        now = time.monotonic()
        if now - self.warned_at < UNCONFIRMED_WARN_EVERY:
            return
        self.warned_at = now
        assert self.primary is not None
        logger.warning(
            "Outbox relay: %d row(s) of replicated queues in %s wait for %d replica(s), %d connected; "
            "each is deleted once its job starts or replicas confirm it, and pushed again only to a "
            "new primary.",
            count, alias, wanted, self.primary.replicas,
        )  # fmt: skip

    def _relay_group(self, alias: str, group: list[tuple[OutboxEntry, Envelope]]) -> set[str]:
        try:
            self._push_rows(alias, group)
            return set()
        except Exception as exc:
            if transient(exc):
                return self._pause(group, exc)
        for one in group:  # one bad row fails its batch: push them one by one to find it
            try:
                self._push_rows(alias, [one])
            except Exception as exc:
                if transient(exc):
                    return self._pause(group, exc)
                if self.scope.strikes.second(("outbox", to_bytes(one[0].pk)), exc):
                    self._quarantine_row_guarded(alias, one[0], exc)
                else:
                    logger.warning("Outbox row %s failed to push (%s); retried once more.", one[0].pk, exc)
        return set()

    def _pause(self, group: list[tuple[OutboxEntry, Envelope]], exc: Exception) -> set[str]:
        queues = {envelope.queue for _, envelope in group}
        self.paused.update(dict.fromkeys(queues, time.monotonic() + RELAY_PAUSE))
        logger.warning(
            "Outbox relay: Redis of queue(s) %s unavailable (%s); their rows wait, the others go on.",
            ", ".join(sorted(queues)),
            exc,
        )
        return queues

    def _quarantine_row_guarded(self, alias: str, row: OutboxEntry, exc: Exception) -> None:
        guarded(f"quarantining outbox row {row.pk!r}", partial(self._quarantine_row, alias, row, exc))

    def _quarantine_row(self, alias: str, row: OutboxEntry, exc: Exception) -> None:
        """A committed job that can never be pushed becomes a dead letter, then leaves the outbox."""
        fields = {
            "data": to_bytes(row.data),
            "origin": to_bytes(row.queue),
            "description": to_bytes(row.job_name),
            "timeout": str(row.timeout).encode(),
            F.OUTBOX_OPTIONS: json.dumps(row.options, default=str).encode(),
        }
        failure = deadletter.Failure(
            job_id=row.pk,
            queue=row.queue,
            reason=DeadLetter.Reason.UNREADABLE,
            exception=exc_path(exc),
            message=f"The outbox row could not be pushed: {exc}",
        )
        deadletter.quarantine(failure, fields, source=f"outbox ({alias})", member=to_bytes(row.pk))
        OutboxEntry.objects.using(alias).filter(pk=row.pk).delete()
        self.scope.strikes.forget(("outbox", to_bytes(row.pk)))

    def _push_rows(self, alias: str, group: list[tuple[OutboxEntry, Envelope]]) -> None:
        """Push rows of one Redis (a second push is a no-op), then drop the rows whose work is done.

        A row stays while its job has not finished ("ledger"), unless the push skipped it as a
        duplicate of a unique job: then nothing will run it. A "replicated" row stays, marked as
        pushed to this primary, until replicas confirm it or its job starts (see :meth:`_confirm`).
        """
        envelopes = [envelope for _, envelope in group]
        pushed = redis_backend.push(envelopes, confirm=False)
        if pushed.error is not None:
            raise pushed.error
        replicated = {e.id for e in envelopes if jobs_settings.durability(e.queue) == REPLICATED}
        keep = set(replicated)
        ledger = {e.id: e.queue for e in envelopes if jobs_settings.durability(e.queue) == LEDGER}
        if ledger:
            statuses = store_of(group[0][1].queue).statuses([i for i in ledger if i in pushed.seen])
            keep |= {job_id for job_id in ledger if statuses.get(job_id, "") is not None}
        rows = OutboxEntry.objects.using(alias)
        rows.filter(pk__in=[row.pk for row, _ in group if row.pk not in keep]).delete()
        if replicated and self.primary is not None:
            rows.filter(pk__in=sorted(replicated)).update(pushed_to=self.primary.run_id)
        if len(group) > len(pushed.seen):
            logger.info("Outbox relay pushed %d job(s)", len(group) - len(pushed.seen))
