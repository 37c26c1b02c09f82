"""The "queue" backend: push to Redis now, or through the outbox.

* Outside a transaction a job is pushed to Redis at once; only if that push fails is it
  written to the outbox, for the relay in ``runjobs`` to deliver.
* Inside one, it is written to the outbox in that same transaction (in bulk, just before the
  COMMIT: see ``outbox``). On commit the rows that survived (a rolled-back savepoint takes its
  rows with it) are pushed in one pipeline; on rollback nothing exists to push. Delivered rows
  are pruned later by the relay, in bulk, so a request pays no second commit.
* Pushing is idempotent: a job whose hash already exists in Redis is not pushed again.
* Durability (``JOBS["DURABILITY"]``, per queue): a "replicated" push waits for Redis' ``WAIT``; one
  no enough replicas confirmed in time keeps an outbox row, which the relay re-pushes and prunes only
  once replicas confirm it. A "ledger" job's row is written even outside a transaction, beside the
  push (``early_rows``), and lives until the job has run (see ``worker.ledger``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from redis.exceptions import RedisError

from django_jobs.client import early_rows, outbox
from django_jobs.conf import LEDGER, REPLICATED, jobs_settings
from django_jobs.core.connections import get_connection, store_of
from django_jobs.core.envelope import Envelope
from django_jobs.store.lifecycle import F
from django_jobs.store.replication import push_confirmed
from django_jobs.telemetry import metrics

logger = logging.getLogger("django_jobs.enqueue")


@dataclass(frozen=True)
class Pushed:
    """What a push did: ids that were already there (or duplicates), the jobs of "replicated" queues
    that no enough replicas confirmed within ``REPLICA_TIMEOUT``, and the jobs whose Redis did not
    answer (with its error): one server down does not hold back the others' pushes."""

    seen: set[str]
    unconfirmed: list[Envelope]
    failed: list[Envelope] = field(default_factory=list)
    error: RedisError | None = None


def push(envelopes: Sequence[Envelope], *, confirm: bool = True) -> Pushed:
    """Push envelopes to Redis, one round trip per queue, each at its queue's durability level; without
    ``confirm``, "replicated" ones too are done once the primary acknowledged them (the relay's pushes
    of rows it confirms later)."""
    seen: set[str] = set()
    unconfirmed: list[Envelope] = []
    failed: list[Envelope] = []
    error: RedisError | None = None
    by_queue: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        by_queue.setdefault(envelope.queue, []).append(envelope)
    for queue, group in by_queue.items():
        try:
            seen |= _push_queue(queue, group, unconfirmed, confirm)
        except RedisError as exc:
            failed += group
            error = exc
    return Pushed(seen, unconfirmed, failed, error)


#: What a "ledger" job's hash carries: its row was written with (or before) the push, so a job whose
#: row is gone has run (see ``worker.rerun``).
LEDGER_MARK = {F.LEDGER: 1}


def _push_queue(queue: str, group: list[Envelope], unconfirmed: list[Envelope], confirm: bool) -> set[str]:
    """Push one queue's envelopes at its level; adds those replicas did not confirm to ``unconfirmed``."""
    store = store_of(queue)
    level = jobs_settings.durability(queue)
    if not confirm or level != REPLICATED:
        return store.push(group, extra=LEDGER_MARK if level == LEDGER else None)
    confirmed = push_confirmed(store, group, jobs_settings.REPLICAS, jobs_settings.REPLICA_TIMEOUT)
    if confirmed.replicas < jobs_settings.REPLICAS:
        unconfirmed += group
        metrics.unreplicated(queue, len(group))
        logger.warning(
            "%d job(s) of queue %s reached %d of %d replica(s) within %g s; they keep an outbox row "
            "until replicas confirm them.",
            len(group), queue, confirmed.replicas, jobs_settings.REPLICAS, jobs_settings.REPLICA_TIMEOUT,
        )  # fmt: skip
    return confirmed.seen


def _unmark(envelopes: Sequence[Envelope]) -> None:
    """Take ``F.LEDGER`` back from jobs pushed without their row: a missing row must not pass for the
    trace of a job that ran. If Redis fails now, the job may be taken for one that ran once a failover
    has made its worker look for the row: logged, as the missing row is."""
    by_queue: dict[str, list[str]] = {}
    for envelope in envelopes:
        by_queue.setdefault(envelope.queue, []).append(envelope.id)
    for queue, ids in by_queue.items():
        try:
            store_of(queue).unmark_ledger(ids)
        except RedisError as exc:
            logger.warning("Could not unmark %d job(s) pushed without their ledger row (%s).", len(ids), exc)


def ledger(envelopes: Sequence[Envelope]) -> list[Envelope]:
    """The envelopes whose queue keeps a ledger row until the job has finished."""
    return [e for e in envelopes if jobs_settings.durability(e.queue) == LEDGER]


def _flush(conn: BaseDatabaseWrapper) -> None:
    """After commit: push every job of this transaction whose outbox row committed, in one go.

    Each enqueue registers this callback; the first to run pushes them all and the rest find
    nothing left. A rolled-back savepoint takes its rows, its envelopes and its callbacks with it.
    """
    envelopes = list(outbox.take_committed(conn).values())
    if not envelopes:
        return
    failed = push(envelopes)
    if failed.error is not None:
        logger.warning(
            "Redis is unreachable after commit (%s); %d job(s) stay in the outbox for the runjobs relay.",
            failed.error,
            len(failed.failed),
        )


def _write_outbox(alias: str, envelopes: list[Envelope]) -> None:
    conn = connections[alias]
    if not conn.in_atomic_block:
        # Autocommit off without an atomic block: Django has no commit hooks, the relay delivers.
        outbox.store(alias, envelopes)
        return
    outbox.enlist(conn, envelopes)
    # robust: a failure after commit is logged, never turned into an error for a committed request (on
    # the connection itself: transaction.on_commit would look it up again)
    conn.on_commit(functools.partial(_flush, conn), robust=True)


def _push_or_store(envelopes: list[Envelope], alias: str) -> None:
    """Push now; the outbox keeps what Redis did not take or replicas did not confirm.

    A ledger job's row is written beside the push (``early_rows``), so a push acknowledged and then
    lost in a failover still has its row: once both answered, the job is lost only if Redis and the
    database lose it together. If the database fails but Redis took the job, the enqueue succeeds,
    logged (that job is then as safe as a "fast" one); if both fail, it raises.
    """
    kept = ledger(envelopes)
    for queue in {e.queue for e in kept}:
        get_connection(queue)  # a queue missing from RQ_QUEUES fails the enqueue before its row exists
    unwritten: DatabaseError | None = None
    pending: early_rows.Pending | None = None
    try:
        pending = early_rows.send(alias, kept) if kept else None
    except DatabaseError as exc:
        unwritten = exc
    try:
        pushed = push(envelopes)
    finally:  # read the row's answer whatever the push did: an unread one would break the connection
        try:
            if pending is not None:
                pending.wait()
        except DatabaseError as exc:
            unwritten = exc
    ids = {e.id for e in kept}
    if unwritten is not None:
        if any(e.id in ids for e in pushed.failed):
            raise unwritten  # neither Redis nor the database holds those jobs
        logger.warning(
            "%d ledger row(s) could not be written (%s); their jobs are in Redis, not in the database.",
            len(kept), unwritten,
        )  # fmt: skip
        _unmark([e for e in kept if e.id not in pushed.seen])
    waiting = pushed.unconfirmed + [e for e in pushed.failed if e.id not in ids]
    if pushed.error is not None:
        logger.warning(
            "Redis is unreachable (%s); %d job(s) go to the outbox.", pushed.error, len(pushed.failed)
        )
    if waiting:
        outbox.store(alias, waiting)


def deliver(envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None:
    """Push now outside a transaction; inside one, write the outbox and push after commit."""
    if alias is None:
        _push_or_store(list(envelopes), using or DEFAULT_DB_ALIAS)
    else:
        _write_outbox(alias, list(envelopes))
