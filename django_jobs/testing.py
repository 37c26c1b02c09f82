"""Helpers for your own tests: capture enqueued jobs, run them inline, or drain Redis in-process.

``JOBS["MODE"] = "capture"`` records jobs instead of queueing them; ``"immediate"`` runs them
inline (at commit inside a transaction; exceptions propagate to the caller). Both treat Django
``TestCase``'s wrapping transaction as no transaction, so they work there unchanged, and an
``atomic()`` block of the code under test as the transaction it is in production.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from . import execution, payload, registry, stats
from .conf import jobs_settings
from .connections import get_connection, queue_configs
from .enqueue import Envelope
from .exceptions import JobNotFound
from .store import Store


@dataclass(frozen=True)
class CapturedJob:
    """A job that capture mode recorded instead of queueing, with its arguments decoded."""

    id: str
    name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass
class Captured:
    """The jobs captured inside one ``capture_jobs()`` block, with assertion helpers."""

    jobs: list[CapturedJob] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[CapturedJob]:
        return iter(self.jobs)

    def named(self, job: registry.Job[Any, Any] | str) -> list[CapturedJob]:
        name = job if isinstance(job, str) else job.name
        return [j for j in self.jobs if j.name == name]

    def assert_enqueued(self, job: registry.Job[Any, Any] | str, *args: Any, **kwargs: Any) -> CapturedJob:
        """Assert one captured job of this kind was called with these arguments.

        Both calls are bound to the job function's signature first, so ``send_welcome(1)`` matches
        ``assert_enqueued(send_welcome, user_id=1)`` and defaults count as passed.
        """
        name = job if isinstance(job, str) else job.name
        expected = _bound(name, list(args), kwargs)
        matches = [j for j in self.named(name) if _bound(name, j.args, j.kwargs) == expected]
        if len(matches) != 1:
            found = f"{len(matches)} such calls" if matches else "none"
            seen = "\n".join(f"  {_call(j.name, j.args, j.kwargs)}" for j in self.jobs) or "  (nothing)"
            raise AssertionError(
                f"expected one {_call(name, list(args), kwargs)}, found {found}; captured:\n{seen}"
            )
        return matches[0]

    def run(self) -> None:
        """Run the captured jobs now, in order, through their registered functions."""
        for captured in self.jobs:
            registry.get(captured.name).func(*captured.args, **captured.kwargs)


def _bound(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
    """The call as the function sees it (every parameter by name, defaults applied), when it binds."""
    try:
        signature = inspect.signature(registry.get(name).func)
        bound = signature.bind(*args, **kwargs)
    except (JobNotFound, TypeError, ValueError):
        return (args, kwargs)  # an unknown job or a call that cannot bind: compare as written
    bound.apply_defaults()
    return bound.arguments


def _call(name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """``name(1, user_id=2)``: one call the way it reads in code."""
    parts = [repr(value) for value in args] + [f"{key}={value!r}" for key, value in kwargs.items()]
    return f"{name}({', '.join(parts)})"


_active: list[Captured] = []
#: The connection attribute listing (savepoint id, delivery) pairs waiting for a savepoint's release.
_WAITING = "_django_jobs_waiting_for_release"
#: Receives captured jobs when MODE is "capture" through settings and no capture_jobs() block is open.
default_capture = Captured()


def _now(mode: str, envelopes: Sequence[Envelope]) -> None:
    for envelope in envelopes:
        name, args, kwargs = payload.loads(envelope.data)
        if mode == "capture":
            for captured in _active or [default_capture]:
                captured.jobs.append(CapturedJob(envelope.id, name, envelope.queue, args, kwargs))
        else:
            registry.get(name).func(*args, **kwargs)


def handle(mode: str, envelopes: Sequence[Envelope], alias: str | None) -> None:
    """The "capture" and "immediate" modes' delivery, honouring the transaction like queue mode.

    Django's ``TestCase`` (and pytest-django's ``django_db``) wraps each test in a transaction that
    never commits, so the code under test's own ``atomic()`` is only a savepoint there, and an
    ``on_commit`` hook would never fire. The job is then delivered when that outermost block of the
    code under test is released, just as it would be at its commit in production; a savepoint
    rollback on the way drops it, exactly as Django drops its ``on_commit`` hooks.
    """
    deliver = functools.partial(_now, mode, envelopes)
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


@contextlib.contextmanager
def capture_jobs() -> Iterator[Captured]:
    """``with capture_jobs() as jobs:`` - jobs enqueued inside are recorded, not queued."""
    captured = Captured()
    _active.append(captured)
    try:
        with override_settings(JOBS={**_jobs_setting(), "MODE": "capture"}):
            yield captured
    finally:
        _active.remove(captured)


@contextlib.contextmanager
def immediate_jobs() -> Iterator[None]:
    """``with immediate_jobs():`` - jobs run inline when enqueued (or at commit)."""
    with override_settings(JOBS={**_jobs_setting(), "MODE": "immediate"}):
        yield


def _jobs_setting() -> dict[str, Any]:
    from django.conf import settings

    return dict(getattr(settings, "JOBS", None) or {})


def run_jobs(queues: Sequence[str] | None = None, *, limit: int = 10_000) -> int:
    """Run the jobs waiting in Redis now, in this process, through the worker's own code path.

    Due retries and delayed jobs are promoted first. There is no hard timeout here (no
    supervisor), but the soft timeout still applies. Returns the number of attempts run.
    """
    names = list(queues or queue_configs())
    store = Store.of(get_connection(names[0]))
    store.maintain(names)
    ran = 0
    limits = registry.limits_json()
    finished: tuple[str, str] | None = None
    while ran < limit:
        _, claimed = store.complete_and_claim(
            names,
            finished=finished,
            worker_name="django_jobs.testing",
            lease_seconds=jobs_settings.LEASE_SECONDS,
            nonce=f"t{ran}",
            finished_ttl=jobs_settings.FINISHED_TTL,
            limits=limits,
        )
        if claimed is None:
            break
        ran += 1
        outcome = execution.run(store, claimed)
        finished = (claimed.token, claimed.queue) if outcome is execution.Outcome.SUCCESS else None
    if finished is not None:
        store.complete(*finished, jobs_settings.FINISHED_TTL)
    stats.flush(store.connection, every=0)
    return ran
