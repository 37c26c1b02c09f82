"""Transaction-aware, durable enqueue.

* Outside a transaction a job is pushed to Redis at once; only if that push fails is it
  written to the outbox, for the relay in ``runjobs`` to deliver.
* Inside one, it is written to the outbox in that same transaction (in bulk, just before the
  COMMIT: see ``outbox``). On commit the rows that survived (a rolled-back savepoint takes its
  rows with it) are pushed in one pipeline; on rollback nothing exists to push. Delivered rows
  are pruned later by the relay, in bulk, so a request pays no second commit.
* Pushing is idempotent: a job whose hash already exists in Redis is not pushed again.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from redis.exceptions import RedisError

from . import outbox, payload
from .conf import jobs_settings
from .connections import get_connection, queue_config
from .exceptions import TransactionAmbiguous
from .models import OutboxEntry
from .signals import job_enqueued
from .store import Store, rq_timestamp, valid_job_id

if TYPE_CHECKING:
    from .registry import Job

logger = logging.getLogger("django_jobs.enqueue")

Call = tuple[Sequence[Any], Mapping[str, Any]]


@dataclass(frozen=True)
class JobHandle:
    """What enqueue returns: enough to find the job again."""

    id: str
    name: str
    queue: str


@dataclass(frozen=True)
class Envelope:
    """One job ready to push: the same data whether it comes from a call or an outbox row."""

    id: str
    name: str
    queue: str
    data: str
    timeout: int
    due: float
    created_at: dt.datetime
    unique_key: str = ""
    debounce: float = 0.0
    cron_run: int | None = None

    def __post_init__(self) -> None:
        # Every id is made here or read back from an outbox row: refuse one that breaks the id rule.
        if not valid_job_id(self.id):
            raise ValueError(
                f"Job id {self.id[:100]!r} is not valid: letters, digits, _ and -, 1 to 64 of them."
            )

    def fields(self) -> dict[str, Any]:
        stamp = rq_timestamp(self.created_at)
        extra = {"dj_cron": self.cron_run} if self.cron_run is not None else {}
        return {
            **extra,
            "data": self.data,
            "created_at": stamp,
            "enqueued_at": stamp,
            "status": "queued",
            "origin": self.queue,
            "description": self.name,
            "timeout": self.timeout,
            "dj_attempt": 0,
        }

    def options(self) -> dict[str, Any]:
        return {
            key: value
            for key, value in (
                ("unique_key", self.unique_key),
                ("debounce", self.debounce),
                ("cron_run", self.cron_run),
            )
            if value
        }

    def row(self) -> OutboxEntry:
        return OutboxEntry(
            id=self.id,
            job_name=self.name,
            queue=self.queue,
            data=self.data,
            timeout=self.timeout,
            due=self.due,
            created_at=self.created_at,
            options=self.options(),
        )

    @classmethod
    def from_row(cls, row: OutboxEntry) -> Envelope:
        return cls(
            row.id, row.job_name, row.queue, row.data, row.timeout, row.due, row.created_at, **row.options
        )


@dataclass(frozen=True)
class Options:
    """How to enqueue, beyond the arguments."""

    delay: float = 0.0  # seconds from now
    unique_key: str = ""  # at most one queued or running job per key
    debounce: float = 0.0  # with unique_key: wait this long; a newer enqueue within it replaces this one
    cron_run: int | None = None  # the CronRun this job fires

    def __post_init__(self) -> None:
        if self.debounce and not self.unique_key:
            raise ValueError("debounce= needs unique_key=: the key says which enqueues replace each other.")
        if self.unique_key and len(self.unique_key) > 200:
            raise ValueError("unique_key= is at most 200 characters.")


def build(
    name: str,
    queue: str,
    timeout: float,
    args: list[Any],
    kwargs: dict[str, Any],
    options: Options = Options(),
) -> Envelope:
    """An envelope for already-encoded arguments (dead-letter requeues come through here too)."""
    queue_config(queue)  # an unknown queue fails at the first enqueue, not at import
    data = payload.dumps(name, args, kwargs, jobs_settings.MAX_PAYLOAD_BYTES).decode()
    due = time.time() + options.delay if options.delay > 0 else 0.0
    now = dt.datetime.now(dt.UTC)
    return Envelope(uuid.uuid4().hex, name, queue, data, math.ceil(timeout), due, now, options.unique_key,
                    options.debounce, options.cron_run)  # fmt: skip


def push(envelopes: Sequence[Envelope]) -> set[str]:
    """Push envelopes to Redis, grouped by connection; returns the ids that were already there."""
    seen: set[str] = set()
    by_queue: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        by_queue.setdefault(envelope.queue, []).append(envelope)
    for queue, group in by_queue.items():
        seen |= Store.of(get_connection(queue)).push(group)
    return seen


# --- transactions -------------------------------------------------------------------------------


def _in_transaction(alias: str) -> bool:
    """True inside a real transaction: an atomic block not opened by Django's TestCase, or autocommit off."""
    conn = connections[alias]
    if conn.connection is not None and not conn.autocommit and not conn.in_atomic_block:
        return True
    return any(not getattr(block, "_from_testcase", False) for block in getattr(conn, "atomic_blocks", []))


def transaction_alias(using: str | None) -> str | None:
    """The alias whose commit the job must wait for, or None to push now."""
    if using is not None:
        return using if _in_transaction(using) else None
    # Only connections already opened in this thread can be inside a transaction.
    active = [conn.alias for conn in connections.all(initialized_only=True) if _in_transaction(conn.alias)]
    if len(active) > 1:
        raise TransactionAmbiguous(
            f"Databases {', '.join(sorted(active))} are all inside a transaction; "
            "call job.using('<alias>').enqueue(...) so the job waits for the right commit."
        )
    return active[0] if active else None


def _flush(conn: BaseDatabaseWrapper) -> None:
    """After commit: push every job of this transaction whose outbox row committed, in one go.

    Each enqueue registers this callback; the first to run pushes them all and the rest find
    nothing left. A rolled-back savepoint takes its rows, its envelopes and its callbacks with it.
    """
    envelopes = list(outbox.take_committed(conn).values())
    if not envelopes:
        return
    try:
        push(envelopes)
    except RedisError:
        logger.warning(
            "Redis is unreachable after commit; %d job(s) stay in the outbox for the runjobs relay.",
            len(envelopes),
            exc_info=True,
        )


def _write_outbox(alias: str, envelopes: list[Envelope]) -> None:
    conn = connections[alias]
    if not conn.in_atomic_block:
        # Autocommit off without an atomic block: Django has no commit hooks, the relay delivers.
        OutboxEntry.objects.using(alias).bulk_create([e.row() for e in envelopes])
        return
    outbox.enlist(conn, envelopes)
    # robust: a failure after commit is logged, never turned into an error for a committed request
    transaction.on_commit(functools.partial(_flush, conn), using=alias, robust=True)


def _push_or_store(envelopes: list[Envelope], alias: str) -> None:
    try:
        push(envelopes)
    except RedisError:
        logger.warning("Redis is unreachable; %d job(s) go to the outbox.", len(envelopes), exc_info=True)
        OutboxEntry.objects.using(alias).bulk_create([e.row() for e in envelopes])


# --- entry point --------------------------------------------------------------------------------


def enqueue_calls(
    definition: Job[Any, Any],
    calls: Sequence[Call],
    *,
    using: str | None = None,
    options: Options = Options(),
) -> list[JobHandle]:
    """Encode, then deliver according to ``JOBS["MODE"]`` and the current transaction."""
    envelopes = []
    for args, kwargs in calls:
        encoded_args, encoded_kwargs = payload.encode(args, kwargs)
        envelopes.append(
            build(
                definition.name, definition.queue, definition.timeout, encoded_args, encoded_kwargs, options
            )
        )
    deliver(envelopes, using=using)
    for envelope in envelopes:
        job_enqueued.send(sender=envelope.name, job_id=envelope.id, queue=envelope.queue)
    return [JobHandle(e.id, e.name, e.queue) for e in envelopes]


def deliver(envelopes: list[Envelope], *, using: str | None = None) -> None:
    """Send built envelopes on their way: to Redis, the outbox, or the test-mode handlers."""
    if not envelopes:
        return
    mode = jobs_settings.MODE
    alias = transaction_alias(using)
    if mode != "queue":
        from . import testing

        testing.handle(mode, envelopes, alias)
    elif alias is None:
        _push_or_store(envelopes, using or DEFAULT_DB_ALIAS)
    else:
        _write_outbox(alias, envelopes)
