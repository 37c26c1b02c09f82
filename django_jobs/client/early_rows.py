"""Ledger rows written beside the push: the INSERT goes out first, its answer is read after Redis'.

A "ledger" job enqueued outside a transaction needs its row and its push; done one after the other
they cost two round trips. On PostgreSQL (psycopg 3) the row's INSERT is sent without waiting, the
push runs while the database works, and the answer is read last, so the enqueue pays about one
round trip. The INSERT's transaction commits asynchronously (``synchronous_commit`` off for it
alone): visible at once, durable unless the database server itself crashes within
``3 * wal_writer_delay`` (0.6 s by default), which loses the job only if Redis loses it too.

Elsewhere (another database, psycopg 2, an open transaction, server-side binding) the rows are
written before the push, the usual way. The statement bypasses Django's cursor, so execute
wrappers do not see it; with ``DEBUG`` it is still recorded in ``connection.queries``.
"""

from __future__ import annotations

import functools
import select
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

from django_jobs.client import outbox
from django_jobs.core.envelope import Envelope

#: Turns the INSERT's own transaction (the query's statements share one) into an asynchronous commit.
ASYNC_COMMIT = "SET LOCAL synchronous_commit TO OFF; "


class Pending(Protocol):
    def wait(self) -> None:
        """Return once the rows are written; raise ``DatabaseError`` if they are not."""


class _Written:
    """Rows already written the usual way."""

    def wait(self) -> None:
        return None


class _Sent:
    """An INSERT sent on a psycopg 3 connection, its answer not read yet."""

    def __init__(self, connection: BaseDatabaseWrapper, sql: str) -> None:
        self.connection, self.sql, self.started = connection, sql, time.monotonic()
        self.pgconn = connection.connection.pgconn
        with connection.wrap_database_errors:
            self.pgconn.send_query(sql.encode())
            while self.pgconn.flush():  # the socket is non-blocking: the rest once it can take it
                select.select([], [self.pgconn.socket], [])

    def wait(self) -> None:
        pgconn, error = self.pgconn, None
        with self.connection.wrap_database_errors:
            while True:
                while pgconn.is_busy():
                    select.select([pgconn.socket], [], [])
                    pgconn.consume_input()
                result = pgconn.get_result()
                if result is None:
                    break
                if result.error_message and error is None:
                    error = result.error_message.decode(errors="replace").strip()
        if self.connection.queries_logged:
            took = time.monotonic() - self.started
            self.connection.queries_log.append({"sql": self.sql, "time": f"{took:.3f}"})
        if error is not None:
            raise DatabaseError(error)


def send(alias: str, envelopes: Sequence[Envelope]) -> Pending:
    """Start writing the rows of ``envelopes``; ``wait()`` on the result after the push."""
    connection = connections[alias]
    if not _can_send(connection):
        outbox.store(alias, envelopes)
        return _Written()
    from psycopg import ClientCursor  # only reached with psycopg 3 installed and in use

    statements = []
    for model, values in outbox.columns(envelopes):
        fields = [(f, f.attname, f.get_default()) for f in model._meta.concrete_fields]
        for start in range(0, len(values), outbox.MAX_HELD):  # bounded, like a transaction's bulk writes
            chunk = values[start : start + outbox.MAX_HELD]
            params = [
                f.get_db_prep_save(v.get(name, default), connection)
                for v in chunk
                for f, name, default in fields
            ]
            sql = _insert(model, connection.ops.quote_name, len(chunk))
            statements.append(ClientCursor(connection.connection).mogrify(sql, params))
    return _Sent(connection, ASYNC_COMMIT + "; ".join(statements))


def _can_send(connection: BaseDatabaseWrapper) -> bool:
    """Whether ``connection`` is PostgreSQL through psycopg 3, in autocommit, with client-side binding."""
    if connection.vendor != "postgresql" or connection.in_atomic_block or not connection.get_autocommit():
        return False
    if connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        return False
    connection.ensure_connection()
    return hasattr(connection.connection, "pgconn")


@functools.lru_cache(maxsize=64)
def _insert(model: type[Model], quote: Callable[[str], str], rows: int) -> str:
    """The INSERT of ``rows`` rows of ``model``, built once: the ORM's compiler costs about half what
    the database does per row."""
    fields = model._meta.concrete_fields
    columns = ", ".join(quote(str(f.column)) for f in fields)
    values = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * rows)
    return f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES {values}"
