"""The jobs an atomic block enqueued: outbox rows written in bulk before COMMIT, pushed after it.

One INSERT per enqueue costs a database round trip each (about 0.2 ms on PostgreSQL), which
made a transaction of many enqueues slower than the Redis pushes it protects. So the rows of an
atomic block are held here and written in one bulk INSERT, at the latest right before COMMIT
and still inside the transaction: a job exists exactly when the data it depends on does.

Django has no before-commit hook, so from a transaction's first enqueue to its end this module
wraps five methods of that one connection object:

* ``commit``: write the held rows first; if that fails, the commit fails and Django rolls back;
* ``savepoint``: write them first, so that every held row is younger than every savepoint;
* ``savepoint_rollback``: therefore drop every held row (and check the written ones after COMMIT);
* ``rollback``, ``close``: drop everything this transaction enqueued.

After COMMIT the wrappers are gone and the on-commit push takes the pending envelopes.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Model

from django_jobs.core.envelope import Envelope
from django_jobs.models import OutboxEntry, PlainOutboxEntry

MAX_HELD = 1000  # rows; more are written at once, so memory stays bounded in huge transactions


#: The columns of :class:`OutboxEntry` that :class:`PlainOutboxEntry` leaves to their database
#: defaults, each filled from the envelope's attribute of the same name.
EXTRA = ("priority", "trace", "expires", "batch", "limit_key")
#: The columns of :class:`OutboxEntry` only the relay writes: every insert leaves them to their default.
RELAYED = ("pushed_to",)


def _columns(envelope: Envelope) -> dict[str, Any]:
    """The values of the columns every outbox row has (:class:`OutboxFields`)."""
    return {
        "id": envelope.id,
        "job_name": envelope.name,
        "queue": envelope.queue,
        "data": envelope.data,
        "timeout": envelope.timeout,
        "due": envelope.due,
        "created_at": envelope.created_at,
        "options": envelope.options(),
    }


def row(envelope: Envelope) -> OutboxEntry:
    """The outbox row that delivers ``envelope`` if its push does not happen."""
    return OutboxEntry(**_columns(envelope), **{name: getattr(envelope, name) for name in EXTRA})


def envelope(entry: OutboxEntry) -> Envelope:
    """The envelope an outbox row holds; raises if the row breaks a rule an envelope checks."""
    return Envelope(
        entry.id, entry.job_name, entry.queue, entry.data, entry.timeout, entry.due, entry.created_at,
        **entry.options, priority=entry.priority, trace=entry.trace, expires=entry.expires, batch=entry.batch,
        limit_key=entry.limit_key,
    )  # fmt: skip


def _plain(envelope: Envelope) -> bool:
    """Whether the row of ``envelope`` holds the default (empty, 0) in each of the :data:`EXTRA` columns."""
    return not any(getattr(envelope, name) for name in EXTRA)


def columns(envelopes: Sequence[Envelope]) -> list[tuple[type[Model], list[dict[str, Any]]]]:
    """The column values of the rows of ``envelopes``, per model, none empty: those with only the
    common columns for :class:`PlainOutboxEntry` (the database fills in the rest), the others whole."""
    plain = [_columns(e) for e in envelopes if _plain(e)]
    whole = [
        {**_columns(e), **{name: getattr(e, name) for name in EXTRA}} for e in envelopes if not _plain(e)
    ]
    return [(model, values) for model, values in ((PlainOutboxEntry, plain), (OutboxEntry, whole)) if values]


def store(alias: str, envelopes: Sequence[Envelope]) -> None:
    """Write rows for ``envelopes`` now, in bulk (for the relay in ``runjobs`` to deliver if their push
    does not happen)."""
    for model, values in columns(envelopes):
        model._default_manager.using(alias).bulk_create([model(**v) for v in values])


class _Transaction:
    """What one connection's open transaction has enqueued, and the wrappers that decide its fate."""

    def __init__(self, alias: str) -> None:
        self.alias = alias  # not the connection: _transactions holds its key weakly
        self.held: list[Envelope] = []  # not in the outbox table yet
        self.pending: dict[str, Envelope] = {}  # to push after commit, if their rows survived
        self.rolled_back_to_savepoint = False  # only then can a written row have been undone
        self.replaced: dict[str, Any] = {}

    def enlist(self, connection: BaseDatabaseWrapper, envelopes: Sequence[Envelope]) -> None:
        if not self.replaced:
            self._wrap(connection)
        self.held.extend(envelopes)
        self.pending.update((e.id, e) for e in envelopes)
        if len(self.held) >= MAX_HELD:
            self.write()

    def write(self) -> None:
        held, self.held = self.held, []
        if held:
            store(self.alias, held)

    def committed(self) -> dict[str, Envelope]:
        """The pending envelopes whose rows are in the table; the state starts afresh."""
        self.write()
        pending, self.pending = self.pending, {}
        if self.rolled_back_to_savepoint:
            self.rolled_back_to_savepoint = False
            ids, rows = list(pending), OutboxEntry.objects.using(self.alias)
            there: set[str] = set()
            for start in range(0, len(ids), 900):  # under SQLite's older 999-parameter limit
                there.update(rows.filter(id__in=ids[start : start + 900]).values_list("id", flat=True))
            pending = {i: e for i, e in pending.items() if i in there}
        return pending

    def _drop_all(self) -> None:
        self.held, self.pending, self.rolled_back_to_savepoint = [], {}, False

    def _wrap(self, conn: BaseDatabaseWrapper) -> None:
        self.replaced = {name: vars(conn).get(name) for name in _WRAPPED}
        original = {name: getattr(conn, name) for name in _WRAPPED}

        def commit() -> None:
            try:
                self.write()
                original["commit"]()
            except BaseException:
                self._drop_all()  # Django rolls back: nothing of this transaction is pushed
                raise
            finally:
                self._unwrap(conn)

        def savepoint() -> str | None:
            self.write()
            return original["savepoint"]()  # type: ignore[no-any-return]

        def savepoint_rollback(sid: str) -> None:
            self.held = []
            self.rolled_back_to_savepoint = True
            original["savepoint_rollback"](sid)

        def rollback() -> None:
            self._unwrap(conn)
            self._drop_all()
            original["rollback"]()

        def close() -> None:
            self._unwrap(conn)
            self._drop_all()
            original["close"]()

        for wrapper in (commit, savepoint, savepoint_rollback, rollback, close):
            setattr(conn, wrapper.__name__, wrapper)

    def _unwrap(self, conn: BaseDatabaseWrapper) -> None:
        for name, previous in self.replaced.items():
            if previous is None:
                vars(conn).pop(name, None)
            else:
                setattr(conn, name, previous)
        self.replaced = {}


_WRAPPED = ("commit", "savepoint", "savepoint_rollback", "rollback", "close")

# Keyed by connection object, not alias: under ASGI one thread serves several connections.
_transactions: weakref.WeakKeyDictionary[BaseDatabaseWrapper, _Transaction] = weakref.WeakKeyDictionary()


def enlist(connection: BaseDatabaseWrapper, envelopes: Sequence[Envelope]) -> None:
    """Write ``envelopes`` to the outbox before ``connection`` commits; forget them if it rolls back."""
    state = _transactions.get(connection)
    if state is None:
        state = _transactions[connection] = _Transaction(connection.alias)
    state.enlist(connection, envelopes)


def take_committed(connection: BaseDatabaseWrapper) -> dict[str, Envelope]:
    """The envelopes to push now that ``connection`` committed (once: later calls get nothing).

    Only a transaction that rolled back to a savepoint pays a query to find which rows survived.
    A test that runs on-commit callbacks inside its own transaction never commits, so what is
    still held is written first.
    """
    state = _transactions.get(connection)
    return {} if state is None else state.committed()
