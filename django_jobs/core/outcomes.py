"""The outcome pipeline: an attempt's end is one event, handled by an ordered list of subscribers.

Wherever an outcome is decided (the work process, the supervisor for a dead child, the reaper for
an expired lease) the decider builds one :class:`AttemptEnded` and calls :func:`publish`. The
subscribers (dead-lettering, periodic-run bookkeeping, metrics, stats, the log line) are connected
by the app's ``ready()``, so this module and ``execution`` import none of the services above them.

Each subscriber is isolated: the outcome is already decided and stored when they run, so what one
raises (signal receivers and hooks are user code) is logged, and the next one still runs.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.dispatch import Signal

from django_jobs.policy import Verdict
from django_jobs.signals import (
    job_cancelled,
    job_expired,
    job_failed,
    job_retrying,
    job_snoozed,
    job_succeeded,
)
from django_jobs.store import Claimed, Scope, Settled, Store
from django_jobs.store.lifecycle import State
from django_jobs.telemetry import history, metrics, stats
from django_jobs.telemetry.logs import log_outcome

logger = logging.getLogger("django_jobs.worker")


class Outcome(enum.StrEnum):
    """How one attempt ended; the ``outcome`` label of the job counter."""

    SUCCESS = "success"
    RETRY = "retry"
    DEAD = "dead"
    TIMEOUT = "timeout"
    LOST = "lost"
    CANCELLED = "cancelled"  # never retried, never dead-lettered
    SNOOZED = "snoozed"  # runs again after its snooze; the attempt is given back, not a failure
    EXPIRED = "expired"  # dropped unrun by a claim: it had not started by its expiry (attempt 0)


class Settling(Protocol):
    """Where an attempt's end is settled, as execution and the subscribers use it: the job store in
    Redis (:class:`~django_jobs.store.Store`), or the one the test modes keep in memory for the jobs
    they run in the caller's process (``backends.inline``)."""

    def fail(
        self,
        token: str,
        queue: str,
        *,
        delay: float | None,
        fields: dict[str, Any],
        finished_ttl: int,
        lost: bool = False,
        cancel: bool = False,
        scope: Scope | None = None,
    ) -> Settled: ...

    def snooze(
        self, token: str, queue: str, seconds: float, finished_ttl: int, scope: Scope | None = None
    ) -> Settled: ...

    def buried(self, job_id: str, ttl: int) -> None: ...

    def statuses(self, job_ids: Sequence[str]) -> dict[str, str | None]: ...


@dataclass(frozen=True)
class Judgement:
    """Why an attempt failed, however it failed: an exception in the job, a hard kill, a dead worker."""

    exception: str
    message: str
    traceback: str
    verdict: Verdict
    reason: str
    cause: BaseException | None = None


@dataclass(frozen=True)
class AttemptEnded:
    """One attempt's end, as every subscriber sees it. ``duration`` is None for an attempt that never
    ran here (undecodable, expired, or settled for an expired lease; a killed work process's ran until
    its death); ``elsewhere``: settled outside the process that ran it (a supervisor, a reaper);
    ``judgement`` and ``history`` are set for a failure; ``bury`` says a dead letter is due (the job
    is in "dying"). ``fenced``: the store refused this end, as whoever took the lease back
    settled (and published) the attempt already; :func:`publish` passes it to no subscriber, so no
    attempt is counted twice."""

    name: str
    job_id: str
    queue: str
    attempt: int
    outcome: Outcome
    duration: float | None
    exception: BaseException | None
    claimed: Claimed
    store: Settling
    judgement: Judgement | None = None
    history: Sequence[dict[str, Any]] = field(default=())
    bury: bool = False
    retry_in: float | None = None  # seconds until the next attempt, for a failure that will retry or a snooze
    result: str | None = None  # a success's return value as JSON, if its job keeps results
    fenced: bool = False
    elsewhere: bool = False  # settled outside the process that ran it (a supervisor, a reaper)


Subscriber = Callable[[AttemptEnded], object]

#: (what it does, for the log line if it fails; the subscriber), in the order they run.
_subscribers: list[tuple[str, Subscriber]] = []


def isolated(what: str, action: Callable[[], object], *args: object) -> None:
    """Run one bookkeeping step of an outcome already decided. Whatever it raises (signal receivers
    and hooks are user code) is logged, never raised: it must neither crash the worker nor change,
    or repeat, the job's outcome. ``what`` is %-formatted with ``args``, only if it failed."""
    try:
        action()
    except BaseException:
        _failed(what, *args)


def _failed(what: str, *args: object) -> None:
    """Log the step that just raised, with its traceback; a failure to log is not raised either."""
    with contextlib.suppress(BaseException):
        logger.warning(f"{what} failed; the job's outcome stands.", *args, exc_info=True)


def connect(subscribers: Sequence[tuple[str, Subscriber]]) -> None:
    """Set the pipeline: the app's ``ready()`` connects the services before :data:`REPORTING`."""
    _subscribers[:] = subscribers


def publish(event: AttemptEnded) -> None:
    """Hand ``event`` to every subscriber in order, each isolated from the others (as :func:`isolated`
    does, without a closure per subscriber and job); a fenced end to none."""
    if event.fenced:
        return
    for what, subscriber in list(_subscribers):
        try:
            subscriber(event)
        except BaseException:
            _failed("%s for job %s %s", what, event.name, event.job_id)


def send(signal: Signal, name: str, claimed: Claimed, **kwargs: Any) -> None:
    """Send one of the job's signals. A receiver's Exception is logged and the later receivers
    still run; a BaseException (``SystemExit``) is logged too, but ends this sending."""
    if not signal.receivers:
        return  # nobody listens: skip the call on every job
    isolated(
        f"A receiver of a signal for job {name} {claimed.id}",
        lambda: signal.send_robust(
            sender=name, job_id=claimed.id, queue=claimed.queue, attempt=claimed.attempt, **kwargs
        ),
    )


def notify(event: AttemptEnded) -> None:
    """The job's signals, wherever the outcome was decided: ``job_succeeded``, ``job_cancelled``,
    ``job_snoozed``, ``job_expired``, or ``job_failed`` and, when the job will run again, ``job_retrying``."""
    if event.outcome is Outcome.SUCCESS:
        send(job_succeeded, event.name, event.claimed, duration=event.duration)
        return
    if event.outcome is Outcome.CANCELLED:
        send(job_cancelled, event.name, event.claimed, duration=event.duration)
        return
    if event.outcome is Outcome.SNOOZED:
        send(job_snoozed, event.name, event.claimed, duration=event.duration, delay=event.retry_in)
        return
    if event.outcome is Outcome.EXPIRED:
        send(job_expired, event.name, event.claimed, expires_at=event.claimed.record.expires)
        return
    send(job_failed, event.name, event.claimed, duration=event.duration, exception=event.exception)
    if event.retry_in is not None:
        send(job_retrying, event.name, event.claimed, delay=event.retry_in)


def count(event: AttemptEnded) -> None:
    """The job counter and the duration histogram; the busy gauge only in the process that ran it."""
    if event.elsewhere or event.duration is None:
        metrics.settled(event.name, event.queue, event.outcome.value, event.duration)
    else:
        metrics.finished(event.name, event.queue, event.outcome.value, event.duration)


def record(event: AttemptEnded) -> None:
    """The dashboard's hourly and daily counts, kept in Redis: none for an attempt a test mode ran
    in memory (Redis is left untouched there, and no later flush may count it)."""
    if isinstance(event.store, Store):
        stats.record(event.name, event.outcome.value, event.queue)


#: The ended state a job is in once an attempt ended this way (a failure ends it when it is buried).
_ENDS = {Outcome.SUCCESS: State.FINISHED, Outcome.CANCELLED: State.CANCELLED, Outcome.EXPIRED: State.EXPIRED}


def keep(event: AttemptEnded) -> None:
    """The job's row in the history, if it is on and this attempt ended the job; as for the counts,
    none for an attempt a test mode ran in memory."""
    state = State.DEAD if event.bury else _ENDS.get(event.outcome)
    if state is None or not isinstance(event.store, Store) or not history.enabled():
        return
    claimed = event.claimed
    found = history.row(
        claimed.record,
        state,
        attempts=event.attempt,
        duration=event.duration,
        worker=claimed.worker,
        errors=event.history,
    )
    history.keep(found)


def log(event: AttemptEnded) -> None:
    """The one log line per attempt; a snooze says how long the job waits, not an error."""
    if event.outcome is Outcome.SNOOZED:
        log_outcome(event.outcome, event.name, event.claimed, event.duration, snooze=event.retry_in)
        return
    log_outcome(event.outcome, event.name, event.claimed, event.duration, event.exception)


#: The subscribers every pipeline ends with, after the services' bookkeeping.
REPORTING: tuple[tuple[str, Subscriber], ...] = (
    ("Sending the job's signals", notify),
    ("Counting an outcome", count),
    ("Recording an outcome", record),
    ("Keeping the job's history", keep),
    ("Logging an outcome", log),
)
