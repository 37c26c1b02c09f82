"""Prove a job is crash-safe: :func:`verify_crash_safe` kills it at every point where a worker can die,
runs the retry, and fails naming each point after which the end differs from a run without a crash.

A run without a crash finds the points (:mod:`~django_jobs.testing.crash`: each statement, commit
and declared outside effect); a second one tells which columns differ between any two runs (ids
from a sequence, timestamps), which are not compared. Then, for each point (a sample of
``JOBS["VERIFY_CRASH_POINTS"]`` of them when there are more, commits and effects first), the
database is put back as it was, the job is killed there, attempt 2 runs to its end, and the end is
compared with the clean run's: the rows of every table (django_jobs' own excepted), the mails sent,
the jobs enqueued and the declared outside effects (made again with the same idempotency key, one
counts once: the outside service dedups it).

The attempts commit as a worker's do, so the verifier needs the database as a worker sees it: call
it from ``TransactionTestCase`` (pytest: ``django_db(transaction=True)``), not inside a transaction.
It leaves the database as it found it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core import mail
from django.db import connections, transaction
from django.test import override_settings

from django_jobs.client.backends.capture import CapturedJob
from django_jobs.conf import jobs_settings
from django_jobs.core import execution, registry
from django_jobs.core.envelope import Envelope
from django_jobs.testing import crash
from django_jobs.testing.effects import (
    Effect,
    and_,
    call,
    count,
    databases,
    envelope,
    hooks,
    own_tables,
    read,
    recording,
    rows,
)
from django_jobs.testing.modes import capture_jobs

Where = tuple[str, str]  # (database alias, table)
Tables = dict[Where, tuple[list[str], list[tuple[Any, ...]]]]


class NotCrashSafe(AssertionError):
    """A crash at some point of a job, then its retry, ends differently from a run without a crash."""


@dataclass
class _End:
    """How one scenario (an attempt, killed or not, and the retry if it was) left things."""

    tables: Tables
    effects: Counter[str] = field(default_factory=Counter)
    unkeyed: set[str] = field(default_factory=set)  # effects made without an idempotency key
    mails: Counter[str] = field(default_factory=Counter)
    enqueued: Counter[str] = field(default_factory=Counter)
    points: list[crash.Point] = field(default_factory=list)
    failed: str = ""  # the last attempt's exception, if it failed


def verify_crash_safe(job: registry.Job[..., Any], *args: Any, **kwargs: Any) -> None:
    """Kill ``job(*args, **kwargs)`` at each point where a worker can die, run the retry, and raise
    :class:`NotCrashSafe` naming each point after which the end differs from a run without a crash."""
    _refuse(job)
    with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"), hooks():
        verifier = _Verifier(envelope(job, args, kwargs), job)
        try:
            findings, tried = verifier.findings()
        finally:
            verifier.restore(_tables())
    if findings:
        raise NotCrashSafe(
            f"{job.name}{call(args, kwargs)} is not crash-safe: after {len(findings)} of the {tried} crash "
            "points tried, the retry ends otherwise than a run without a crash:\n- " + "\n- ".join(findings)
        )


def _refuse(job: registry.Job[..., Any]) -> None:
    if job.is_async:
        raise TypeError(f"verify_crash_safe runs plain jobs; {job.name} is an async def job")
    if execution.caller_transactions():
        raise AssertionError(
            "verify_crash_safe commits as a worker does, so it cannot run inside a transaction (Django's "
            "TestCase, pytest-django's db): use TransactionTestCase (pytest: django_db(transaction=True))"
        )


class _Verifier:
    """The scenarios of one job and payload, each from the same database."""

    def __init__(self, envelope: Envelope, job: registry.Job[..., Any]) -> None:
        self.envelope, self.job = envelope, job
        self.source = job.func.__code__.co_filename
        self.start = self.now = _tables()

    def findings(self) -> tuple[list[str], int]:
        """Every point whose crash ends differently, in words; and how many points were tried."""
        clean = self.scenario(None)
        if clean.failed:
            raise AssertionError(
                f"{self.job.name} failed without a crash ({clean.failed}): nothing to compare"
            )
        volatile = _volatile(clean.tables, self.scenario(None).tables)
        tried = _sample(clean.points, jobs_settings.VERIFY_CRASH_POINTS)
        found = []
        for index in tried:
            ended = self.scenario(index)
            differences = _differences(clean, ended, volatile)
            if differences:
                advice = any(ended.effects[what] > clean.effects[what] for what in ended.unkeyed)
                key = ": pass an idempotency key to the outside service" if advice else ""
                found.append(f"a crash after {clean.points[index]} {and_(differences)}{key}")
        return found, len(tried)

    def scenario(self, crash_at: int | None) -> _End:
        """Put the database back, run the job (killed after point ``crash_at``), then the retry."""
        self.restore(self.now)
        mail.outbox = []
        killed = crash.Run(source=self.source, crash_at=crash_at)
        retry = crash.Run(source=self.source)
        timeout = self.job.timeout + 10
        with capture_jobs() as during:
            with recording(killed):
                ended = crash.attempt(self.envelope, 1, killed, timeout)
            if killed.crashed is not None:
                with recording(retry):
                    ended = crash.attempt(self.envelope, 2, retry, timeout)
        self.now = _tables()
        made = killed.effects + retry.effects
        return _End(
            self.now, _tally(made), {e.description for e in made if e.key is None}, _mails(mail.outbox),
            _enqueues(during.jobs), killed.points,
            f"{type(ended.exception).__name__}: {ended.exception}" if ended and ended.exception else "",
        )  # fmt: skip

    def restore(self, now: Tables) -> None:
        """Put back each table that differs from the start, in one transaction per database (its
        foreign keys are checked at the commit)."""
        changed = [where for where, found in now.items() if rows(found[1]) != rows(self.start[where][1])]
        for alias in {alias for alias, _ in changed}:
            conn = connections[alias]
            with transaction.atomic(using=alias), conn.cursor() as cursor:
                for _, table in [where for where in changed if where[0] == alias]:
                    columns, found = self.start[(alias, table)]
                    cursor.execute(f"DELETE FROM {conn.ops.quote_name(table)}")
                    if found:
                        names = ", ".join(conn.ops.quote_name(column) for column in columns)
                        marks = ", ".join(["%s"] * len(columns))
                        cursor.executemany(
                            f"INSERT INTO {conn.ops.quote_name(table)} ({names}) VALUES ({marks})", found
                        )
        self.now = self.start


def _tables() -> Tables:
    """Every table of every database the test may use, as it is now."""
    found: Tables = {}
    for alias in databases():
        for table in sorted(connections[alias].introspection.django_table_names(only_existing=True)):
            contents = read(alias, table)
            if contents is None:
                raise AssertionError(f"verify_crash_safe reads whole tables; `{table}` has too many rows")
            found[(alias, table)] = contents
    return found


def _volatile(first: Tables, second: Tables) -> dict[Where, set[int]]:
    """Per table, the columns two runs without a crash filled differently (a sequence's ids, times)."""
    volatile: dict[Where, set[int]] = {}
    for where, (columns, found) in first.items():
        other = second[where][1]
        if rows(found) != rows(other):
            volatile[where] = {
                i
                for i in range(len(columns))
                if rows([(r[i],) for r in found]) != rows([(r[i],) for r in other])
            }
    return volatile


def _column(found: Sequence[tuple[Any, ...]], index: int) -> Counter[tuple[Any, ...]]:
    return rows([(row[index],) for row in found])


def _differences(clean: _End, ended: _End, volatile: dict[Where, set[int]]) -> list[str]:
    """What the scenario left otherwise than the clean run, in words."""
    found = [ended.failed and f"leaves the retry failing ({ended.failed})"]
    own = own_tables()
    for where, (columns, expected) in clean.tables.items():
        if where[1] in own:
            continue
        kept = [i for i in range(len(columns)) if i not in volatile.get(where, ())]
        want = rows([tuple(row[i] for i in kept) for row in expected])
        got = rows([tuple(row[i] for i in kept) for row in ended.tables[where][1]])
        if got.total() != want.total():
            found.append(f"leaves {count(got.total(), 'row')} in `{where[1]}` against {want.total()}")
        elif got != want:
            found.append(f"leaves {count((got - want).total(), 'row')} of `{where[1]}` otherwise")
    found += _repeats(clean.effects, ended.effects, "makes {what} {n} against {m}")
    found += _repeats(clean.mails, ended.mails, "sends the mail {what} {n} against {m}")
    found += _repeats(clean.enqueued, ended.enqueued, "enqueues {what} {n} against {m}")
    return [text for text in found if text]


def _repeats(clean: Counter[str], ended: Counter[str], words: str) -> list[str]:
    return [
        words.format(what=what, n=_times(ended[what]), m=_times(clean[what]))
        for what in sorted(clean | ended)
        if clean[what] != ended[what]
    ]


def _times(n: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _sample(points: Sequence[crash.Point], limit: int) -> list[int]:
    """At most ``limit`` points, commits and effects first, the statements spread evenly."""
    if len(points) <= limit:
        return list(range(len(points)))
    first = [i for i, point in enumerate(points) if point.kind != "statement"][:limit]
    rest = [i for i, point in enumerate(points) if point.kind == "statement"]
    room = limit - len(first)
    spread = [rest[round(k * (len(rest) - 1) / max(room - 1, 1))] for k in range(room)] if room else []
    return sorted(set(first) | set(spread))


def _tally(made: Sequence[Effect]) -> Counter[str]:
    """Each outside effect counted as the outside service sees it: once per idempotency key."""
    unkeyed = Counter(e.description for e in made if e.key is None)
    return unkeyed + Counter(
        description for description, _ in {(e.description, e.key) for e in made if e.key}
    )


def _mails(sent: Sequence[mail.EmailMessage]) -> Counter[str]:
    return Counter(f"to {', '.join(message.to) or 'nobody'} ({message.subject!r})" for message in sent)


def _enqueues(jobs: Sequence[CapturedJob]) -> Counter[str]:
    unique = {(job.name, job.envelope.unique_key) for job in jobs if job.envelope and job.envelope.unique_key}
    return Counter(job.name for job in jobs if not (job.envelope and job.envelope.unique_key)) + Counter(
        name for name, _ in unique
    )
