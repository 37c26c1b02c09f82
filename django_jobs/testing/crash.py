"""Where an attempt can die, and a death there: the crash points of :mod:`~django_jobs.testing.safety`.

A worker can die after any database statement, any commit and any outside call. An attempt runs
here in a thread of its own, through the worker's own attempt (``execution.run``), its statements
and commits observed (:func:`~django_jobs.testing.effects.observed`), its declared effects recorded
(:func:`~django_jobs.testing.effects.effect`). Killed at a point, it
dies as a process would: its database connections are closed under it (so an open transaction rolls
back, on the server) and its thread stops there for good: no ``except``, ``finally`` or later line of
the job runs.
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.client.backends import inline
from django_jobs.core import execution
from django_jobs.core.envelope import Envelope
from django_jobs.core.outcomes import AttemptEnded
from django_jobs.testing.effects import Effect, Observer, Recorder, observed, written_table

WORKER = "verify"
#: Statements that only steer a transaction: no point of their own (the commit is one).
_STEERING = re.compile(r"^\s*(SAVEPOINT|RELEASE|ROLLBACK|BEGIN|COMMIT)\b", re.I)
_FROM = re.compile(r'\bFROM\s+["`]?([\w.]+)', re.I)
_VERBS = {"INSERT": "the INSERT into", "UPDATE": "the UPDATE of", "DELETE": "the DELETE from"}


@dataclass(frozen=True)
class Point:
    """A point where a worker can die: after a statement, a commit or a declared outside effect."""

    kind: str  # "statement", "commit" or "effect"
    what: str  # "the UPDATE of `shop_order`"
    line: str  # where in the job's code: "jobs.py, line 42"
    in_transaction: bool  # what the attempt wrote since its last commit rolls back

    def __str__(self) -> str:
        where = f" ({self.line})" if self.line else ""
        pending = " and before the commit" if self.in_transaction else ""
        return f"{self.what}{where}{pending}"


@dataclass
class Run(Recorder, Observer):
    """One attempt, observed: the points it reached; with ``crash_at``, killed after that one."""

    source: str = ""  # the job's file, whose line each point names
    crash_at: int | None = None
    points: list[Point] = field(default_factory=list)
    crashed: Point | None = None
    over: threading.Event = field(default_factory=threading.Event)
    used: set[BaseDatabaseWrapper] = field(default_factory=set)
    cursor: Any = None  # the driver's cursor of the last statement, which may hold its lock still

    def made(self, declared: Effect) -> None:
        super().made(declared)
        in_transaction = any(conn.in_atomic_block for conn in self.used)
        self.reached(Point("effect", f"`{declared.description}`", self._line(), in_transaction))

    def after(self, conn: BaseDatabaseWrapper, cursor: Any, sql: str) -> None:
        self.used.add(conn)
        self.cursor = cursor
        if not _STEERING.match(sql):
            self.reached(Point("statement", describe(sql), self._line(), conn.in_atomic_block))

    def committed(self, conn: BaseDatabaseWrapper) -> None:
        self.reached(Point("commit", "the commit", self._line(), False))

    def reached(self, point: Point) -> None:
        self.points.append(point)
        if self.crash_at is not None and len(self.points) == self.crash_at + 1:
            self.crashed = point
            self._die()

    def _die(self) -> None:
        with contextlib.suppress(Exception):  # SQLite holds a statement's lock until its cursor ends
            if self.cursor is not None:
                self.cursor.close()
        for conn in self.used:  # closed on the server's side: an open transaction rolls back
            with contextlib.suppress(Exception):
                if conn.connection is not None:
                    conn.connection.close()
        self.over.set()
        threading.Event().wait()  # this thread runs nothing of the job ever again

    def _line(self) -> str:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.source:
            frame = frame.f_back  # type: ignore[assignment]
        return f"{Path(self.source).name}, line {frame.f_lineno}" if frame is not None else ""


def describe(sql: str) -> str:
    """A statement in a few words: "the UPDATE of `shop_order`"."""
    verb = sql.split(None, 1)[0].upper() if sql.strip() else "?"
    if verb in _VERBS:
        return f"{_VERBS[verb]} `{written_table(sql)}`"
    found = _FROM.search(sql) if verb == "SELECT" else None
    return f"the SELECT from `{found[1]}`" if found else f"the {verb} statement"


def attempt(envelope: Envelope, number: int, run: Run, timeout: float) -> AttemptEnded | None:
    """Run attempt ``number`` of the job as a worker would, in a thread of its own with its own
    database connections; None if it was killed at ``run.crash_at``."""
    ended: list[AttemptEnded] = []

    def body() -> None:
        try:
            with observed(run):
                ended.append(execution.run(inline.InlineStore(), inline.claimed(envelope, WORKER, number)))
        finally:
            connections.close_all()
            run.over.set()

    threading.Thread(target=body, name=f"django_jobs verify attempt {number}", daemon=True).start()
    if not run.over.wait(timeout):
        raise AssertionError(f"attempt {number} of {envelope.name} did not end within {timeout:g} s")
    return ended[0] if ended else None
