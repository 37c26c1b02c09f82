"""The "queue" backend: push to Redis now, or through the outbox.

* Outside a transaction a job is pushed to Redis at once; only if that push fails is it
  written to the outbox, for the relay in ``runjobs`` to deliver.
* Inside one, it is written to the outbox in that same transaction (in bulk, just before the
  COMMIT: see ``outbox``). On commit the rows that survived (a rolled-back savepoint takes its
  rows with it) are pushed in one pipeline; on rollback nothing exists to push. Delivered rows
  are pruned later by the relay, in bulk, so a request pays no second commit.
* Pushing is idempotent: a job whose hash already exists in Redis is not pushed again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from redis.exceptions import RedisError

from .. import outbox
from ..connections import get_connection
from ..envelope import Envelope
from ..store import Store

logger = logging.getLogger("django_jobs.enqueue")


def push(envelopes: Sequence[Envelope]) -> set[str]:
    """Push envelopes to Redis, grouped by connection; returns the ids that were already there."""
    seen: set[str] = set()
    by_queue: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        by_queue.setdefault(envelope.queue, []).append(envelope)
    for queue, group in by_queue.items():
        seen |= Store.of(get_connection(queue)).push(group)
    return seen


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
        outbox.store(alias, envelopes)
        return
    outbox.enlist(conn, envelopes)
    # robust: a failure after commit is logged, never turned into an error for a committed request
    transaction.on_commit(functools.partial(_flush, conn), using=alias, robust=True)


def _push_or_store(envelopes: list[Envelope], alias: str) -> None:
    try:
        push(envelopes)
    except RedisError:
        logger.warning("Redis is unreachable; %d job(s) go to the outbox.", len(envelopes), exc_info=True)
        outbox.store(alias, envelopes)


def deliver(envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None:
    """Push now outside a transaction; inside one, write the outbox and push after commit."""
    if alias is None:
        _push_or_store(list(envelopes), using or DEFAULT_DB_ALIAS)
    else:
        _write_outbox(alias, list(envelopes))
