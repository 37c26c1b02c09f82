"""The supervisor's periodic duties: promote due jobs, reap dead workers' leases, finish
interrupted dead-lettering, relay the outbox, sweep the open batches, and prune old idempotency keys
and batches.

Every ``runjobs`` runs all of them, so no duty waits on one elected process, and each step is
an atomic script or an idempotent write, so two ``runjobs`` doing the same step cannot double it.

Every loop makes progress past what it cannot handle. Items are handled one by one; an item that
fails because a service is down waits behind the others and is retried later; an item that can
never be handled (unreadable bytes, an id that breaks the id rule, a hash that vanished, the same
failure twice) is quarantined: written as a dead letter with its raw data, then removed.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from django.db import DatabaseError, InterfaceError, OperationalError, connections, router
from django.utils import timezone
from redis import exceptions as redis_errors

from .. import alerts, batches, deadletter, execution, idempotency, metrics, outbox, outcomes, registry
from ..backends import redis as redis_backend
from ..conf import LEDGER, jobs_settings
from ..connections import connection_identity, get_connection, queue_configs, queues_on
from ..cron import Scheduler
from ..durability import ledger_queues
from ..envelope import Envelope
from ..exceptions import WorkerLost
from ..models import DeadLetter, OutboxEntry
from ..store import DYING, LOST, VANISHED, Claimed, Store, VanishedId, to_bytes, to_text, valid_job_id
from ..store.lifecycle import F
from . import structure
from .ledger import Ledger

logger = logging.getLogger("django_jobs.worker")

#: Errors that say a service is down or busy, not that the item is bad: keep the item, retry later.
_TRANSIENT = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.OutOfMemoryError,
    redis_errors.ReadOnlyError,
    redis_errors.ClusterError,
    redis_errors.TryAgainError,
    redis_errors.NoPermissionError,
    OperationalError,
    InterfaceError,
)

#: Seconds an item that failed waits before it is looked at again (it goes behind the others).
RETRY_SECONDS = 5.0
#: Seconds a lost attempt of a queue this runjobs does not serve waits before this one looks again.
FOREIGN_AFTER = 1.0
#: Seconds the relay leaves a queue alone after its Redis failed to answer.
RELAY_PAUSE = 3.0


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` means "retry later" (a service down) rather than "this item is bad"."""
    return isinstance(exc, _TRANSIENT) or str(exc).startswith(("BUSY ", "LOADING ", "MASTERDOWN "))


#: Errors that say a Redis server does not answer at all: the rest of its pass is skipped.
UNREACHABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError)


def _guarded(what: str, action: Callable[[], object]) -> Exception | None:
    """Run one duty or item; a failure is logged and retried next time, never fatal. Returns it."""
    try:
        action()
    except (redis_errors.RedisError, DatabaseError) as exc:
        logger.warning("%s skipped (%s); will retry.", what, exc)
        return exc
    except Exception as exc:
        logger.exception("%s failed", what)
        return exc
    return None


class Every:
    """Runs a duty at most once per ``seconds``."""

    def __init__(self, seconds: float, duty: Callable[[], object]) -> None:
        self.seconds, self.duty, self.next = seconds, duty, 0.0

    def __call__(self, now: float) -> Exception | None:
        """Run the duty if it is due; returns what it raised."""
        if now < self.next:
            return None
        self.next = now + self.seconds
        return _guarded(getattr(self.duty, "__name__", "duty"), self.duty)


class Strikes:
    """Each failing item's last failure, so the second identical one can be told from a first."""

    LIMIT = 10_000  # items remembered; past it the memory starts afresh (a strike costs one retry)

    def __init__(self) -> None:
        self.last: dict[tuple[str, bytes], str] = {}

    def second(self, item: tuple[str, bytes], exc: BaseException) -> bool:
        """Record this failure; True if the item already failed exactly this way."""
        signature = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"
        if self.last.pop(item, None) == signature:
            return True
        if len(self.last) >= self.LIMIT:
            self.last.clear()
        self.last[item] = signature
        return False

    def forget(self, item: tuple[str, bytes]) -> None:
        self.last.pop(item, None)


class Unreadable(Exception):
    """An item no retry can help (unreadable bytes, a broken id, a key that is not a hash)."""

    reason = DeadLetter.Reason.UNREADABLE


class Vanished(Unreadable):
    """A job whose hash is gone from Redis (eviction, a deleted key): nothing can run it."""

    reason = DeadLetter.Reason.VANISHED


def _exc_path(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _raw_id(key: str, member: bytes) -> bytes:
    """The job id inside a member of LOST (``<id>:<nonce>``) or DYING (the id itself)."""
    return member.rpartition(b":")[0] if key == LOST else member


def _dying_age() -> float:
    """Past three leases, whoever was writing a dead job's row is gone (or the database was down)."""
    return 3 * jobs_settings.LEASE_SECONDS


def _decoded(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise Unreadable(f"The {what} is not UTF-8.") from None


def _job_id(raw: bytes) -> str:
    """The id as text, if it is one django_jobs could have made; otherwise the item is unreadable."""
    job_id = _decoded(raw, "job id")
    if not valid_job_id(job_id):
        raise Unreadable("The job id breaks the id rule: letters, digits, _ and -, at most 64 characters.")
    return job_id


class Maintenance:
    """The duties of one Redis server: ``queues`` are the ones this runjobs serves there. The relay,
    the ledger and the periodic jobs cover every queue of ``RQ_QUEUES`` on that server; the ``lead``
    server's maintenance (the first one's) also prunes idempotency keys and old batches, and takes the
    outbox rows and periodic jobs of queues missing from ``RQ_QUEUES``, so each is done once per runjobs."""

    def __init__(self, store: Store, queues: Sequence[str], interval: float, *, lead: bool = True) -> None:
        self.store, self.queues, self.lead = store, list(queues), lead
        self.limits = registry.limits_json()  # the registry is complete once Django is set up
        self.scheduler = Scheduler(store.connection, self.owns)
        self.strikes = Strikes()
        self.paused: dict[str, float] = {}  # queue -> when (monotonic) the relay tries its Redis again
        self.ledger = Ledger(store, self._relay_rows, self.owns)
        self.batches = batches.Sweep()
        self.duties = [
            Every(interval, self.promote_and_reap),
            Every(1.0, self.check_structures),  # before the relay, whose pushes a broken key would fail
            Every(1.0, self.relay_outbox),
            Every(1.0, self.ledger.watch_primary),
            Every(1.0, self.ledger.settle),
            Every(min(interval, 1.0), self.ledger.sweep_if_due),
            Every(5.0, self.finish_dying),
            Every(5.0, self.record_vanished),
            Every(5.0, self.release_parked),
            Every(min(interval, 1.0), self.sweep_batches),
            Every(600.0, self.prune_keys),
            Every(600.0, self.prune_batches),
            Every(5.0, self.flush_alerts),
            Every(min(interval, 0.2), self.scheduler.tick),
        ]

    def tick(self) -> None:
        """Run the duties that are due. One that finds Redis unreachable ends the pass: its error is
        raised, and the caller sets the server aside until it answers again."""
        execution.db_hygiene()  # a connection an outage broke is reopened, not failed on forever
        now = time.monotonic()
        for duty in self.duties:
            failed = duty(now)
            if isinstance(failed, UNREACHABLE):
                self.ledger.lost_contact()
                raise failed

    def owns(self, queue: str) -> bool:
        """Whether ``queue``'s ledger rows and periodic jobs are this maintenance's to handle."""
        if queue in self.queues:
            return True
        if queue not in queue_configs():
            return self.lead
        return queue in queues_on(self.queues[0])

    def promote_and_reap(self) -> None:
        self.store.maintain(self.queues, self.limits)
        for token in self.store.lost_tokens():
            self._item(LOST, token, self._settle_lost)

    def finish_dying(self) -> None:
        """Write the rows of dead jobs whose worker died (or whose DB was down) before writing them."""
        for job_id in self.store.dying(older_than=_dying_age()):
            self._item(DYING, job_id, self._bury)

    @staticmethod
    def _retry_after(key: str) -> float:
        """The score offset that brings a failed item back in ``RETRY_SECONDS``, behind the others.

        A DYING member is looked at only once it is older than :func:`_dying_age`."""
        return RETRY_SECONDS - (_dying_age() if key == DYING else 0.0)

    # --- one item of LOST or DYING ------------------------------------------------------------------

    def _item(self, key: str, member: bytes, handle: Callable[[bytes], None]) -> None:
        """Handle one member so that, whatever it holds, it neither stops the scan nor stays at its head."""
        try:
            handle(member)
        except Unreadable as exc:
            self._or_defer(key, member, partial(self._quarantine, key, member, exc))
        except Exception as exc:
            self._or_defer(key, member, partial(self._failed, key, member, exc))
        else:
            self.strikes.forget((key, member))

    def _or_defer(self, key: str, member: bytes, action: Callable[[], None]) -> None:
        """Run ``action``; if even that fails (a service down), the item waits behind the others."""
        try:
            action()
        except Exception as exc:
            logger.warning(
                "%s item %r kept for later (%s)", key, member[:200], exc, exc_info=not transient(exc)
            )
            _guarded(f"deferring {key} item", partial(self.store.defer, key, member, self._retry_after(key)))

    def _failed(self, key: str, member: bytes, exc: Exception) -> None:
        """A service down: retry later. The same failure twice: the item itself is the problem."""
        if not transient(exc) and self.strikes.second((key, member), exc):
            self._quarantine(key, member, exc)
            return
        logger.warning(
            "%s item %r failed (%s: %s); it waits behind the others and is retried.",
            key,
            member[:200],
            _exc_path(exc),
            exc,
            exc_info=not transient(exc),
        )
        self.store.defer(key, member, self._retry_after(key))

    def _quarantine(self, key: str, member: bytes, exc: Exception) -> None:
        """Write the item's dead letter (reason from ``exc``), then remove it from ``key``."""
        raw_id = _raw_id(key, member)
        record = self.store.record(raw_id)
        failure = deadletter.Failure(
            job_id=to_text(raw_id or member),  # an id that breaks the rule is filed under a surrogate
            queue=record.queue,
            reason=getattr(exc, "reason", DeadLetter.Reason.UNREADABLE),
            exception=_exc_path(exc),
            message=str(exc),
        )
        deadletter.quarantine(failure, record.snapshot, source=key, member=member)
        self.store.settled(key, member, raw_id, jobs_settings.FINISHED_TTL, record.queue)
        self.strikes.forget((key, member))

    def _settle_lost(self, member: bytes) -> None:
        job_id = _job_id(_raw_id(LOST, member))
        token = _decoded(member, "lease token")
        record = self.store.record(job_id)
        if record.readable and not record.exists:
            raise Vanished("The job's hash is gone from Redis (evicted or deleted); nothing can run it.")
        if not record.readable or not record.fields.get("origin"):
            raise Unreadable(f"The job hash names no queue: {record.problem or 'no origin field'}")
        queue = _decoded(record.fields["origin"], "queue name in the job hash")
        if queue not in self.queues:
            self.store.defer(LOST, member, FOREIGN_AFTER)  # the runjobs serving that queue settles it
            return
        claimed = Claimed(queue, job_id, token, record)
        lost = WorkerLost("The worker running this job died: its lease expired unrenewed.")
        outcomes.publish(execution.settle_failure(store=self.store, claimed=claimed, lost=True, exc=lost))

    def _bury(self, member: bytes) -> None:
        job_id = _job_id(member)
        record = self.store.record(job_id)
        if record.readable and not record.exists:
            raise Vanished("The dead job's hash is gone from Redis (evicted or deleted).")
        failure = deadletter.Failure(
            job_id=job_id,
            queue=record.queue,
            reason=record.text(F.REASON, DeadLetter.Reason.UNDECODABLE.value),
            exception=record.text(F.EXCEPTION, "django_jobs.exceptions.PayloadError"),
            message=record.text(F.MESSAGE, "The job hash in Redis is not a django_jobs job."),
            traceback=record.text("exc_info"),
            history=record.history,
        )
        deadletter.bury(self.store, failure, record.snapshot)

    def release_parked(self) -> None:
        """Put back on their queues the parked jobs of our queues whose type is no longer paused:
        a resume normally does it, but one that died half-way (or a pause removed by hand) leaves
        them; one SMEMBERS per pass while nothing is parked."""
        lists = [(queue, name) for queue, name in self.store.parked_lists() if queue in self.queues]
        if not lists:
            return
        held = {pause.name for pause in self.store.pauses() if pause.kind == "job"}
        for queue, name in lists:
            if name in held:
                continue
            # one broken list (the structure check sets it aside) never holds back the others
            try:
                moved, _ = self.store.unpark(queue, name)
            except redis_errors.ResponseError as exc:
                logger.warning("Parked jobs of %s on queue %s not put back: %s", name, queue, exc)
                continue
            if moved:
                logger.info(
                    "Put %d parked job(s) of %s back on queue %s: it is not paused", moved, name, queue
                )

    def record_vanished(self) -> None:
        """Dead-letter the ids a claim popped after their hash was gone, so no eviction is silent."""
        for item in self.store.vanished():  # one that fails waits behind the others, like LOST and DYING
            self._or_defer(VANISHED, item.member, partial(self._record_vanished, item))

    def _record_vanished(self, item: VanishedId) -> None:
        message = (
            f"The job's id was taken from queue {item.queue!r} but its hash was gone from Redis "
            "(evicted under maxmemory, or deleted), so nothing ran and its payload is lost."
        )
        deadletter.record(
            deadletter.Failure(item.id, item.queue, DeadLetter.Reason.VANISHED, "JobVanished", message),
            {},
        )
        if self.store.forget_vanished(item):  # counted and logged once, by whoever removed it
            metrics.vanished(item.queue)
            logger.warning(
                "Job %s vanished from queue %s: %s Recorded as a dead letter.", item.id, item.queue, message
            )

    # --- the outbox relay ---------------------------------------------------------------------------

    def relay_outbox(self, batch: int = 500) -> None:
        """Push outbox rows the on-commit push missed, and prune rows already delivered."""
        cutoff = timezone.now() - dt.timedelta(seconds=1)  # leave fresh rows to their on-commit push
        for alias in connections:
            if router.allow_migrate_model(alias, OutboxEntry):
                _guarded(f"relaying the outbox of {alias}", partial(self._relay, alias, cutoff, batch))

    def _relay(self, alias: str, cutoff: dt.datetime, batch: int) -> None:
        """The oldest rows of this server's queues (and, for the lead, of unknown ones) whose Redis is
        not paused; learning of a Redis down, look again.

        Rows of ledger queues are the ledger's: it pushes them when their job is missing from Redis."""
        now = time.monotonic()
        skipped = {queue for queue, until in self.paused.items() if until > now} | set(ledger_queues())
        mine = queues_on(self.queues[0])
        # Rows of another server's queues are its maintenance's; the lead also takes unknown queues'.
        ours = OutboxEntry.objects.using(alias).filter(created_at__lt=cutoff)
        if self.lead:
            ours = ours.exclude(queue__in=[queue for queue in queue_configs() if queue not in mine])
        else:
            ours = ours.filter(queue__in=mine)
        while True:
            rows = list(ours.exclude(queue__in=skipped).order_by("created_at")[:batch])
            paused = self._relay_rows(alias, rows) if rows else set()
            if not paused:
                return
            skipped |= paused  # grows every round, so the loop ends

    def _relay_rows(self, alias: str, rows: list[OutboxEntry]) -> set[str]:
        """Push rows grouped by Redis connection; returns the queues whose Redis was down (now paused)."""
        groups: dict[str, list[tuple[OutboxEntry, Envelope]]] = {}
        for row in rows:
            try:  # an unknown queue, broken options, an id that breaks the rule: never pushable
                envelope = outbox.envelope(row)
                groups.setdefault(connection_identity(row.queue), []).append((row, envelope))
            except Exception as exc:
                self._quarantine_row_guarded(alias, row, exc)
        return set().union(*(self._relay_group(alias, group) for group in groups.values()))

    def _relay_group(self, alias: str, group: list[tuple[OutboxEntry, Envelope]]) -> set[str]:
        try:
            _push_rows(alias, group)
            return set()
        except Exception as exc:
            if transient(exc):
                return self._pause(group, exc)
        for one in group:  # one bad row fails its batch: push them one by one to find it
            try:
                _push_rows(alias, [one])
            except Exception as exc:
                if transient(exc):
                    return self._pause(group, exc)
                if self.strikes.second(("outbox", to_bytes(one[0].pk)), exc):
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
        _guarded(f"quarantining outbox row {row.pk!r}", partial(self._quarantine_row, alias, row, exc))

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
            exception=_exc_path(exc),
            message=f"The outbox row could not be pushed: {exc}",
        )
        deadletter.quarantine(failure, fields, source=f"outbox ({alias})", member=to_bytes(row.pk))
        OutboxEntry.objects.using(alias).filter(pk=row.pk).delete()
        self.strikes.forget(("outbox", to_bytes(row.pk)))

    def check_structures(self) -> None:
        """Move aside a queue, lease or scheduled key of the wrong type, so it stops failing every job."""
        structure.quarantine_wrong_types(self.store.connection, self.queues)

    def sweep_batches(self) -> None:
        """Settle the batch members whose end no event reported: one page of the sweep per pass."""
        self.batches.step()

    def prune_keys(self) -> None:
        """Delete a page of idempotency keys past their retention."""
        if self.lead:  # the database is one for every server: once per runjobs is enough
            idempotency.prune()

    def prune_batches(self) -> None:
        """Delete a page of ended batches past their retention; a duty of its own, so a failing key
        prune never holds it back."""
        if self.lead:
            batches.prune()

    def flush_alerts(self) -> None:
        """Send the summary of each dead-letter group whose alert window closed."""
        alerts.flush(self.store.connection)


def _push_rows(alias: str, group: list[tuple[OutboxEntry, Envelope]]) -> None:
    """Push rows of one Redis (a second push is a no-op), then drop the rows whose work is done.

    A row stays while replicas have not confirmed its push ("replicated") or its job has not finished
    ("ledger"), unless the push skipped it as a duplicate of a unique job: then nothing will run it.
    """
    envelopes = [envelope for _, envelope in group]
    pushed = redis_backend.push(envelopes)
    if pushed.error is not None:
        raise pushed.error
    keep = {e.id for e in pushed.unconfirmed}
    ledger = {e.id: e.queue for e in envelopes if jobs_settings.durability(e.queue) == LEDGER}
    if ledger:
        statuses = Store.of(get_connection(group[0][1].queue)).statuses(
            [i for i in ledger if i in pushed.seen]
        )
        keep |= {job_id for job_id in ledger if statuses.get(job_id, "") is not None}
    OutboxEntry.objects.using(alias).filter(
        pk__in=[row.pk for row, _ in group if row.pk not in keep]
    ).delete()
    if len(group) > len(pushed.seen):
        logger.info("Outbox relay pushed %d job(s)", len(group) - len(pushed.seen))
