"""What the verifiers observe of a job's run: the outside effects a project declares with
:func:`effect`, the tables a statement writes, a table's rows, and the words the findings use.

Shared by :mod:`~django_jobs.testing.verify` (two deliveries) and :mod:`~django_jobs.testing.crash`
(a crash at each point, then the retry).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.test.testcases import DatabaseOperationForbidden  # type: ignore[attr-defined]

from django_jobs.core import registry
from django_jobs.core.envelope import Envelope
from django_jobs.testing.modes import capture_jobs

#: A table holding more rows than this is not read whole (``None`` is returned for it).
SNAPSHOT_ROWS = 10_000
_WRITE = re.compile(r'^\s*(INSERT\s+(?:OR\s+\w+\s+)?INTO|UPDATE|DELETE\s+FROM)\s+["`]?([\w.]+)["`]?', re.I)

Rows = Counter[tuple[Any, ...]]


@dataclass(frozen=True)
class Effect:
    """An outside effect the project declared (:func:`effect`): what it is, and the idempotency key
    it was made with, if any (the outside service dedups by it)."""

    description: str
    key: str | None = None


@dataclass
class Recorder:
    """The effects declared while it records; a verifier's run may also act on each one."""

    effects: list[Effect] = field(default_factory=list)

    def made(self, declared: Effect) -> None:
        self.effects.append(declared)


_recording: list[Recorder] = []


def effect(description: str, *, key: str | None = None) -> None:
    """Declare an outside effect (a call to a payment API, a message to a broker) where it happens,
    say in the project's client wrapper, once the call is made: a no-op except while a verifier
    records. ``key``: the idempotency key the call carries, if any."""
    if _recording:
        _recording[-1].made(Effect(description, key))


@contextlib.contextmanager
def recording(recorder: Recorder) -> Iterator[Recorder]:
    """Send the effects declared inside (in any thread) to ``recorder``."""
    _recording.append(recorder)
    try:
        yield recorder
    finally:
        _recording.remove(recorder)


class Observer:
    """Told of each statement and commit of the code run while it observes (:func:`observed`), in
    whatever thread that code reaches: an ``async def`` job's ORM calls run in another one."""

    def before(self, conn: BaseDatabaseWrapper, sql: str) -> None:
        """A statement is about to run on ``conn``."""

    def after(self, conn: BaseDatabaseWrapper, cursor: Any, sql: str) -> None:
        """A statement ran; ``cursor``: the driver's, with its ``rowcount``."""

    def committed(self, conn: BaseDatabaseWrapper) -> None:
        """``conn`` committed its transaction."""


_observer: contextvars.ContextVar[Observer | None] = contextvars.ContextVar(
    "django_jobs_verify", default=None
)
#: Where every statement of a Django cursor passes, after the connection's own execute wrappers.
_EXECUTE = "_execute_with_wrappers"
_hooked = [0]  # how many verifications have the hooks installed


@contextlib.contextmanager
def observed(observer: Observer | None) -> Iterator[None]:
    """Send this context's statements and commits (and those of the threads it reaches) to
    ``observer``; None: to nobody, say for a verifier's own reads."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


@contextlib.contextmanager
def hooks() -> Iterator[None]:
    """Put the two hooks :func:`observed` needs in place, on Django's cursor and commit, for every
    connection in every thread: an observer is found through the context, so the rest pass by."""
    execute, commit = getattr(CursorWrapper, _EXECUTE), BaseDatabaseWrapper.commit

    def observed_execute(self: CursorWrapper, sql: str, params: Any, many: bool, executor: Any) -> Any:
        observer = _observer.get()
        if observer is None:
            return execute(self, sql, params, many, executor)
        observer.before(self.db, sql)
        result = execute(self, sql, params, many, executor)
        observer.after(self.db, self.cursor, sql)
        return result

    def observed_commit(self: BaseDatabaseWrapper) -> None:
        commit(self)
        observer = _observer.get()
        if observer is not None:
            observer.committed(self)

    if not _hooked[0]:
        setattr(CursorWrapper, _EXECUTE, observed_execute)  # not in the type stubs
        BaseDatabaseWrapper.commit = observed_commit  # type: ignore[method-assign]
    _hooked[0] += 1
    try:
        yield
    finally:
        _hooked[0] -= 1
        if not _hooked[0]:
            setattr(CursorWrapper, _EXECUTE, execute)
            BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]


def envelope(job: registry.Job[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Envelope:
    """The job as ``job.enqueue(*args, **kwargs)`` would push it, for a verifier to deliver."""
    with capture_jobs() as captured:
        job.enqueue(*args, **kwargs)
    if not captured.jobs or captured.jobs[0].envelope is None:
        raise AssertionError(
            f"{job.name} was not enqueued: a verifier enqueues the job itself, so call it outside an "
            "atomic() block of your own (Django's TestCase's transaction is fine)"
        )
    return captured.jobs[0].envelope


def databases() -> list[str]:
    """The aliases of the databases the caller may use (a test case names its own; the job cannot
    use the others either)."""
    usable = []
    for conn in connections.all():
        try:
            conn.cursor().close()
        except DatabaseOperationForbidden:
            continue
        usable.append(conn.alias)
    return usable


def own_tables() -> set[str]:
    """django_jobs' own tables (idempotency keys, outbox, dead letters, history): not effects."""
    return {model._meta.db_table for model in apps.get_app_config("django_jobs").get_models()}


def written_table(sql: str) -> str:
    """The table an INSERT, UPDATE or DELETE statement writes, or ""."""
    match = _WRITE.match(sql)
    return match[2] if match else ""


def read(alias: str, table: str) -> tuple[list[str], list[tuple[Any, ...]]] | None:
    """A table's columns and rows as the database driver returns them, or None past
    :data:`SNAPSHOT_ROWS`."""
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
        rows = cursor.fetchmany(SNAPSHOT_ROWS + 1)
        columns = [column[0] for column in cursor.description]
    if len(rows) > SNAPSHOT_ROWS:
        return None
    return columns, rows


def snapshot(alias: str, table: str) -> Rows | None:
    """The table's rows (a multiset), or None past :data:`SNAPSHOT_ROWS`."""
    found = read(alias, table)
    return None if found is None else rows(found[1])


def rows(found: Sequence[Sequence[Any]]) -> Rows:
    """Rows as a multiset (a JSON column's value as its text)."""
    return Counter(tuple(hashable(value) for value in row) for row in found)


def hashable(value: Any) -> Any:
    """A JSON column's dict or list as its sorted JSON text, so rows can be counted."""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def and_(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def call(args: Sequence[Any], kwargs: dict[str, Any]) -> str:
    """How the job was called, for a finding's first words."""
    return "(" + ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]) + ")"
