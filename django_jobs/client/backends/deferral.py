"""Delivery at "commit" for the test backends, which must honour the transaction like queue mode.

Django's ``TestCase`` (and pytest-django's ``django_db``) wraps each test in a transaction that
never commits, so the code under test's own ``atomic()`` is only a savepoint there, and an
``on_commit`` hook would never fire. The job is then delivered when that outermost block of the
code under test is released, just as it would be at its commit in production; a savepoint
rollback on the way drops it, exactly as Django drops its ``on_commit`` hooks.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

#: The connection attribute listing (savepoint id, delivery) pairs waiting for a savepoint's release.
_WAITING = "_django_jobs_waiting_for_release"


def at_commit(alias: str | None, deliver: Callable[[], None]) -> None:
    """Run ``deliver`` now outside a transaction, else when the code under test's transaction ends."""
    conn = connections[alias] if alias is not None else None
    if conn is None or not conn.in_atomic_block:
        deliver()
    elif not getattr(conn.atomic_blocks[0], "_from_testcase", False):
        transaction.on_commit(deliver, using=conn.alias)  # a real transaction
    elif (sid := _outermost_savepoint(conn)) is None:
        deliver()  # atomic(savepoint=False) inside the test's transaction: no release to wait for
    else:
        transaction.on_commit(deliver, using=conn.alias)  # so a savepoint rollback drops it
        _on_release(conn, sid, deliver)


def _outermost_savepoint(conn: BaseDatabaseWrapper) -> str | None:
    """The savepoint of the outermost atomic block that a test case did not open."""
    blocks = conn.atomic_blocks
    first = next(i for i, block in enumerate(blocks) if not getattr(block, "_from_testcase", False))
    # Every block but possibly the outermost pushed a savepoint id: count them from the innermost.
    return conn.savepoint_ids[first - len(blocks)]


def _on_release(conn: BaseDatabaseWrapper, sid: str, deliver: Callable[[], None]) -> None:
    """Run ``deliver`` right after savepoint ``sid`` is released, unless a rollback dropped it first."""
    waiting: list[tuple[str, Callable[[], None]]] | None = getattr(conn, _WAITING, None)
    if waiting is None:
        waiting = []
        setattr(conn, _WAITING, waiting)
        release = conn.savepoint_commit

        def savepoint_commit(released: str) -> None:
            release(released)
            _released(conn, released)

        setattr(conn, "savepoint_commit", savepoint_commit)  # noqa: B010 - this connection only
    alive = _hooked(conn)
    waiting[:] = [(s, hook) for s, hook in waiting if id(hook) in alive]  # forget rolled-back ones
    waiting.append((sid, deliver))


def _released(conn: BaseDatabaseWrapper, sid: str) -> None:
    waiting: list[tuple[str, Callable[[], None]]] = getattr(conn, _WAITING)
    due = [hook for s, hook in waiting if s == sid]
    if not due:
        return
    waiting[:] = [(s, hook) for s, hook in waiting if s != sid]
    alive = _hooked(conn)
    due = [hook for hook in due if id(hook) in alive]
    gone = {id(hook) for hook in due}
    conn.run_on_commit = [entry for entry in conn.run_on_commit if id(entry[1]) not in gone]
    for hook in due:
        hook()


def _hooked(conn: BaseDatabaseWrapper) -> set[int]:
    """The on_commit hooks still registered: a savepoint rollback removes those registered inside it."""
    return {id(entry[1]) for entry in conn.run_on_commit}
