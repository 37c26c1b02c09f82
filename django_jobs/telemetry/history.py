"""The history of ended jobs in the database (:class:`~django_jobs.models.JobHistory`), written in
bulk off the hot path.

Each process buffers the rows of the jobs it ended (:func:`keep`) and writes them in one statement
every :data:`FLUSH_EVERY` seconds, or once :data:`FLUSH_ROWS` wait (:func:`flush`, where the
outcome counters are flushed): a job costs an append, not a query, and the database a write every
few seconds per process. A database that does not answer keeps the rows for the next flush, up to
:data:`MAX_PENDING`; past it the oldest are dropped with a warning (the history is a record, never a
reason to stop jobs).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections, router, transaction
from django.utils import timezone

from django_jobs.conf import jobs_settings
from django_jobs.store import JobRecord
from django_jobs.store.lifecycle import F, State

logger = logging.getLogger("django_jobs.history")

#: Rows a process keeps while the database does not answer.
MAX_PENDING = 10_000
#: Seconds between two writes of a process's rows, unless ``FLUSH_ROWS`` are waiting before that.
FLUSH_EVERY = 5.0
FLUSH_ROWS = 5000
#: Rows deleted per prune.
PRUNE_BATCH = 1000

_pending: deque[dict[str, Any]] = deque(maxlen=MAX_PENDING)
_flushed_at = 0.0


def row(
    record: JobRecord,
    state: State,
    *,
    attempts: int | None = None,
    duration: float | None = None,
    worker: str = "",
    errors: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The history row of a job that ended in ``state``, from its record and what its last attempt
    adds (the attempt, how long it ran, its worker, its failures)."""
    return {
        "job_id": record.id,
        "job_name": record.name[:200],
        "queue": record.queue[:100],
        "state": state.name.lower(),
        "attempts": record.attempt if attempts is None else attempts,
        "duration": duration,
        "enqueued_at": record.time(F.CREATED_AT) or record.time(F.ENQUEUED_AT),
        "ended_at": dt.datetime.now(dt.UTC),
        "worker": (worker or record.worker)[:200],
        "errors": list(record.history if errors is None else errors),
        "data": record.data.decode(errors="replace").replace("\x00", "\ufffd"),  # PostgreSQL refuses NUL
    }


def enabled() -> bool:
    """Whether ended jobs are kept (``JOBS["HISTORY"]``). Asked before a row is built, so a process
    with the history off builds none."""
    return bool(jobs_settings.HISTORY)


def keep(row: dict[str, Any]) -> None:
    """Buffer one ended job's row (the fields of ``JobHistory``), to be written by :func:`flush`; the
    caller asked :func:`enabled` first."""
    if len(_pending) == MAX_PENDING:
        logger.warning(
            "History buffer full: the oldest unwritten row is dropped (job %s).", _pending[0]["job_id"]
        )
    _pending.append(row)


def flush(*, every: float = FLUSH_EVERY) -> None:
    """Write the buffered rows if ``every`` seconds passed since the last write. Never raises: rows
    the database refuses (garbage a job's record carried) are dropped with a warning, one by one,
    so they never hold back the others; rows of a database that does not answer are kept."""
    global _flushed_at
    if not _pending or (len(_pending) < FLUSH_ROWS and time.monotonic() - _flushed_at < every):
        return
    rows = list(_pending)
    try:
        _write(rows)
    except (OperationalError, InterfaceError) as exc:
        logger.debug("History not written yet: %s", exc)
        rows = []
    except DatabaseError:
        rows = rows[: _one_by_one(rows)]
    for _ in rows:
        _pending.popleft()
    _flushed_at = time.monotonic()


#: The columns of a history row, in the order :func:`_write` sends them.
COLUMNS = (
    "job_id", "job_name", "queue", "state", "attempts", "duration", "enqueued_at", "ended_at", "worker",
    "errors", "data",
)  # fmt: skip


def _write(rows: Sequence[dict[str, Any]]) -> None:
    """One statement for ``rows``, written by hand: the ORM's per-field, per-row preparation
    (``bulk_create``) would cost a no-op job several per cent of its time. In a savepoint inside a
    caller's transaction: a refused row never breaks it."""
    from django_jobs.models import JobHistory

    alias = router.db_for_write(JobHistory)
    connection = connections[alias]
    ops = connection.ops
    table = ops.quote_name(JobHistory._meta.db_table)
    columns = ", ".join(ops.quote_name(name) for name in COLUMNS)
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if _psycopg3(connection):
            _copy(connection, f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)", rows)
            return
        adapt = _utc_text if _stores_utc_text(connection) else ops.adapt_datetimefield_value
        places = ", ".join(["%s"] * len(COLUMNS))
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({places})", [_adapted(row, adapt) for row in rows]
        )


def _stores_utc_text(connection: Any) -> bool:
    """Whether the database stores an aware datetime as the text of its naive UTC value, as Django's
    SQLite backend does with ``USE_TZ`` and no ``TIME_ZONE`` of its own: then :func:`_utc_text`
    gives what its adapter gives, for half the time."""
    return connection.vendor == "sqlite" and bool(settings.USE_TZ) and connection.timezone_name == "UTC"


def _utc_text(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not dt.UTC:  # the rows' own are UTC already: no conversion to pay for
        value = value.astimezone(dt.UTC)
    return value.replace(tzinfo=None).isoformat(" ")


def _psycopg3(connection: Any) -> bool:
    if connection.vendor != "postgresql":
        return False
    from django.db.backends.postgresql.psycopg_any import is_psycopg3  # imports the driver

    return bool(is_psycopg3)


#: The PostgreSQL type of each column, as binary COPY sends it.
_PG_TYPES = {
    "CharField": "varchar", "TextField": "text", "PositiveIntegerField": "int4", "FloatField": "float8",
    "DateTimeField": "timestamptz", "JSONField": "jsonb",
}  # fmt: skip


def _copy(connection: Any, sql: str, rows: Sequence[dict[str, Any]]) -> None:
    """PostgreSQL: binary COPY on psycopg's own cursor, the cheapest way in, for the client (no SQL
    text to build or escape) and the server (no statement per row)."""
    import psycopg

    from django_jobs.models import JobHistory

    meta = JobHistory._meta
    types = [_PG_TYPES[meta.get_field(name).get_internal_type()] for name in COLUMNS]
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as raw:
        if len(connection.atomic_blocks) == 1:  # its own transaction, not a caller's
            # a record, not a job: its commit need not wait for the disk (a database crash within
            # 3 * wal_writer_delay loses those rows; the jobs are safe)
            raw.execute("SET LOCAL synchronous_commit TO OFF")
        _copy_rows(raw, sql, types, rows)


def _copy_rows(raw: Any, sql: str, types: list[str], rows: Sequence[dict[str, Any]]) -> None:
    from psycopg.types.json import Jsonb

    errors = COLUMNS.index("errors")
    with raw.copy(sql) as copy:
        copy.set_types(types)
        for row in rows:
            values = [row[name] for name in COLUMNS]
            values[errors] = Jsonb(list(row["errors"]))
            copy.write_row(values)


def _json(errors: Sequence[Any]) -> str:
    return json.dumps(list(errors)) if errors else "[]"  # most jobs failed no attempt


#: The columns before the first datetime, which every backend takes as they are.
_AS_THEY_ARE = itemgetter(*COLUMNS[: COLUMNS.index("enqueued_at")])


def _adapted(row: dict[str, Any], adapt: Callable[[Any], Any]) -> tuple[Any, ...]:
    """A row's values as any backend but PostgreSQL takes them, in :data:`COLUMNS` order: its
    datetimes and its JSON adapted (the leading columns picked in C: a loop costs a job a microsecond)."""
    return (
        *_AS_THEY_ARE(row), adapt(row["enqueued_at"]), adapt(row["ended_at"]), row["worker"],
        _json(row["errors"]), row["data"],
    )  # fmt: skip


def _one_by_one(rows: Sequence[dict[str, Any]]) -> int:
    """Write ``rows`` one at a time, dropping each one refused; how many were settled (written or
    dropped) before the database stopped answering."""
    for settled, one in enumerate(rows):
        try:
            _write([one])
        except (OperationalError, InterfaceError):
            return settled
        except DatabaseError as exc:
            logger.warning("History row of job %s dropped: the database refused it (%s).", one["job_id"], exc)
    return len(rows)


def forget() -> None:
    """Drop what this process buffered: a forked child must not write its parent's rows again."""
    _pending.clear()


def prune(batch: int = PRUNE_BATCH, budget: float = 1.0) -> int:
    """Delete rows older than ``JOBS["HISTORY_RETENTION"]``, ``batch`` at a time from the oldest id on,
    for at most about ``budget`` seconds (enough to keep up with thousands of jobs a second); returns
    how many. Each batch reads the first ids, O(batch) whatever the table holds; a row written late
    (after a database outage) waits until the rows before it go."""
    from django_jobs.models import JobHistory

    cutoff = timezone.now() - dt.timedelta(seconds=jobs_settings.HISTORY_RETENTION)
    deadline = time.monotonic() + budget
    total = 0
    while True:
        head = list(JobHistory.objects.order_by("id").values_list("pk", "ended_at")[:batch])
        stale = list(itertools.takewhile(lambda row: row[1] < cutoff, head))
        if stale:
            total += JobHistory.objects.filter(pk__in=[pk for pk, _ in stale]).delete()[0]
        if len(stale) < batch or time.monotonic() >= deadline:
            return total
