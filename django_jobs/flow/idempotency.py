"""``idempotent(key)``: run a side effect at most once per key, guarded by a unique database row.

The claim is one statement that reports whether it inserted (``INSERT ... ON CONFLICT DO
NOTHING`` on PostgreSQL, ``INSERT OR IGNORE`` on SQLite). It runs inside its own atomic block
(a savepoint when nested), so if the body raises, the claim rolls back with it and the retry
can claim again. On PostgreSQL a concurrent duplicate waits for the first holder's commit and
then reports "already done"; a serialization failure is an ordinary, retryable error.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone

from django_jobs.conf import jobs_settings

_INSERT = {
    "postgresql": "INSERT INTO {table} ({key}, {created}) VALUES (%s, %s) ON CONFLICT ({key}) DO NOTHING",
    "sqlite": "INSERT OR IGNORE INTO {table} ({key}, {created}) VALUES (%s, %s)",
    "mysql": "INSERT IGNORE INTO {table} ({key}, {created}) VALUES (%s, %s)",
}


def claim_key(key: str, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Insert ``key``; True if this call inserted it. Call it inside the transaction of the side effect."""
    if not key or len(key) > 255:
        raise ValueError(f"Idempotency keys are 1 to 255 characters, got {len(key)}.")
    from django_jobs.models import IdempotencyKey  # not at import: django_jobs/__init__ imports this module

    connection = connections[using]
    quote = connection.ops.quote_name
    meta = IdempotencyKey._meta
    sql = _INSERT[connection.vendor].format(
        table=quote(meta.db_table),
        key=quote("key"),
        created=quote("created_at"),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [key, timezone.now()])
        return bool(cursor.rowcount == 1)


@contextmanager
def idempotent(key: str, *, using: str = DEFAULT_DB_ALIAS) -> Iterator[bool]:
    """``with idempotent(key) as first:`` - do the side effect only when ``first`` is True.

    The block is atomic: if it raises, the key is released for the next attempt. For a side
    effect outside the database (an HTTP call), also pass ``key`` to that service as its
    idempotency key, because the database cannot roll back a request already sent.
    """
    with transaction.atomic(using=using):
        yield claim_key(key, using=using)


def claim(key: str, *, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Deprecated name of :func:`claim_key` (it read like claiming a job); removed in the next release."""
    warnings.warn(
        "django_jobs.claim() is now claim_key(); the old name goes away in the next release.",
        DeprecationWarning,
        stacklevel=2,
    )
    return claim_key(key, using=using)


def prune(batch: int = 1000, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete keys older than ``JOBS["IDEMPOTENCY_RETENTION"]``, one batch; returns how many."""
    from django_jobs.models import IdempotencyKey

    cutoff = timezone.now() - dt.timedelta(seconds=jobs_settings.IDEMPOTENCY_RETENTION)
    stale = list(
        IdempotencyKey.objects.using(using).filter(created_at__lt=cutoff).values_list("pk", flat=True)[:batch]
    )
    if not stale:
        return 0
    deleted, _ = IdempotencyKey.objects.using(using).filter(pk__in=stale).delete()
    return deleted
