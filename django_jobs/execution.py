"""One attempt of one job: decode, look up by name, run under a timeout, and settle the outcome."""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections, reset_queries
from django.db.backends.base.base import BaseDatabaseWrapper
from django.dispatch import Signal

from . import cron, deadletter, metrics, payload, registry, stats
from .exceptions import JobNotFound, JobTimeout, PayloadError, PayloadTooLarge, WorkerLost
from .logs import exception_path, exception_text, exception_traceback
from .logs import log_outcome as log_outcome  # re-exported: callers that log an outcome themselves
from .models import DeadLetter
from .policy import Verdict, classify
from .signals import job_failed, job_retrying, job_started, job_succeeded
from .store import Claimed, Store

logger = logging.getLogger("django_jobs.worker")


class Outcome(enum.StrEnum):
    """How one attempt ended; the ``outcome`` label of the job counter."""

    SUCCESS = "success"
    RETRY = "retry"
    DEAD = "dead"
    TIMEOUT = "timeout"
    LOST = "lost"


@dataclass(frozen=True)
class Failed:
    """A failed attempt, however it failed: an exception in the job, a hard kill, a dead worker."""

    exception: str
    message: str
    traceback: str
    verdict: Verdict
    reason: str
    cause: BaseException | None = None


def _judge(exc: BaseException, claimed: Claimed, definition: registry.Job[Any, Any] | None) -> Failed:
    path, message, text = exception_path(exc), exception_text(exc), exception_traceback(exc)
    if definition is None:
        reason = DeadLetter.Reason.UNDECODABLE
        if isinstance(exc, JobNotFound):
            reason = DeadLetter.Reason.UNREGISTERED
        elif isinstance(exc, PayloadTooLarge):  # a decompression bomb: quarantined, never inflated
            reason = DeadLetter.Reason.UNREADABLE
        return Failed(path, message, text, Verdict.DEAD, reason, exc)
    verdict = classify(exc, attempt=claimed.attempt, policy=definition.policy, permanent=definition.permanent)
    exhausted = claimed.attempt >= definition.policy.max_attempts
    reason = (
        DeadLetter.Reason.WORKER_LOST
        if isinstance(exc, WorkerLost) and exhausted
        else (DeadLetter.Reason.EXHAUSTED if exhausted else DeadLetter.Reason.PERMANENT)
    )
    return Failed(path, message, text, verdict, reason, exc)


def isolated(what: str, action: Callable[[], object]) -> None:
    """Run one bookkeeping step of an outcome already decided. Whatever it raises (signal receivers
    and hooks are user code) is logged, never raised: it must neither crash the worker nor change,
    or repeat, the job's outcome."""
    try:
        action()
    except BaseException:
        with contextlib.suppress(BaseException):
            logger.warning("%s failed; the job's outcome stands.", what, exc_info=True)


def _notify(signal: Signal, name: str, claimed: Claimed, **kwargs: Any) -> None:
    """Send one of the job's signals. A receiver's Exception is logged and the later receivers
    still run; a BaseException (``SystemExit``) is logged too, but ends this sending."""
    isolated(
        f"A receiver of a signal for job {name} {claimed.id}",
        lambda: signal.send_robust(
            sender=name, job_id=claimed.id, queue=claimed.queue, attempt=claimed.attempt, **kwargs
        ),
    )


def _history(claimed: Claimed, failed: Failed) -> list[dict[str, Any]]:
    history = claimed.record.history  # garbage in a job's own field must not stop its settling
    entry = {
        "attempt": claimed.attempt,
        "at": dt.datetime.now(dt.UTC).isoformat(),
        "exception": failed.exception,
        "message": failed.message[:500],
    }
    return [*history, entry][-25:]


def settle_failure(store: Store, claimed: Claimed, exc: BaseException, *, lost: bool = False) -> Outcome:
    """Retry with backoff or dead-letter. ``lost``: the lease already moved to LOST (worker died)."""
    try:
        definition: registry.Job[Any, Any] | None = registry.get(payload.loads(claimed.record.data)[0])
    except (JobNotFound, PayloadError):
        definition = None
    failed = _judge(exc, claimed, definition)
    history = _history(claimed, failed)
    fields = {
        "dj_history": json.dumps(history),
        "exc_info": failed.traceback[-20_000:],
        "dj_reason": failed.reason,
        "dj_exception": failed.exception,
        "dj_message": failed.message[:2000],
    }
    name = definition.name if definition else "(unknown)"
    if failed.verdict is Verdict.RETRY and definition is not None:
        # A lost worker's job goes straight back: the crash was not the job's failure to back off from.
        delay = 0.0 if isinstance(exc, WorkerLost) else definition.policy.delay(claimed.attempt)
        settled = store.fail(claimed.token, claimed.queue, delay=delay, fields=fields, lost=lost)
        if settled:
            _notify(job_retrying, name, claimed, delay=delay)
        if lost or isinstance(exc, WorkerLost):  # reaped after its lease expired, or its process died
            outcome = Outcome.LOST
        else:
            outcome = Outcome.TIMEOUT if isinstance(exc, JobTimeout) else Outcome.RETRY
    else:
        settled = store.fail(claimed.token, claimed.queue, delay=None, fields=fields, lost=lost)
        if settled:
            failure = deadletter.Failure(
                claimed.id,
                claimed.queue,
                failed.reason,
                failed.exception,
                failed.message,
                failed.traceback,
                history,
            )
            # On a DB outage (or a failing alert hook) the job waits in "dying" for the supervisor.
            isolated(
                f"Dead-lettering job {name} {claimed.id}",
                lambda: deadletter.bury(store, failure, claimed.fields),
            )
        outcome = Outcome.DEAD
    if not settled:
        logger.warning(
            "Job %s %s: attempt %d was fenced off; another attempt owns it now.",
            name,
            claimed.id,
            claimed.attempt,
        )
    return outcome


@contextlib.contextmanager
def soft_timeout(seconds: float) -> Iterator[None]:
    """Raise JobTimeout inside the job after ``seconds``; the supervisor's hard kill backs it up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise JobTimeout(f"Job ran longer than its timeout of {seconds:g} s.")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _needs_closing(conn: BaseDatabaseWrapper) -> bool:
    leaked_transaction = conn.in_atomic_block or not conn.get_autocommit()
    broken = conn.errors_occurred and not conn.is_usable()
    max_age = conn.settings_dict["CONN_MAX_AGE"]
    expired = bool(max_age) and conn.close_at is not None and time.monotonic() >= conn.close_at
    return leaked_transaction or broken or expired


def db_hygiene() -> None:
    """Between jobs: drop broken or expired connections and a leaked transaction, keep healthy ones.

    Unlike ``close_old_connections``, a ``CONN_MAX_AGE=0`` connection is kept while usable, so a
    worker does not reconnect for every job.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and _needs_closing(conn):
            conn.close()
        conn.errors_occurred = False
    if settings.DEBUG:
        reset_queries()


def queue_wait(claimed: Claimed) -> float | None:
    enqueued = claimed.record.time("enqueued_at")
    if enqueued is None:
        return None
    return max((dt.datetime.now(dt.UTC) - enqueued).total_seconds(), 0.0)


def report(
    outcome: Outcome,
    name: str,
    claimed: Claimed,
    exc: BaseException | None = None,
    duration: float | None = None,
) -> None:
    """Count and log one settled attempt, each step isolated. ``duration`` is None for an attempt
    that never ran here: undecodable, or settled for a dead work process or an expired lease."""
    if duration is None:
        isolated("Counting an outcome", lambda: metrics.settled(name, claimed.queue, outcome.value))
    else:
        isolated(
            "Counting an outcome", lambda: metrics.finished(name, claimed.queue, outcome.value, duration)
        )
    isolated("Recording an outcome", lambda: stats.record(name, outcome.value))
    isolated("Logging an outcome", lambda: log_outcome(outcome, name, claimed, duration or 0.0, exc))


def report_settled(outcome: Outcome, claimed: Claimed, exc: BaseException | None = None) -> None:
    """:func:`report` for an attempt settled outside its work process, named from the job hash."""
    report(outcome, claimed.record.name, claimed, exc)


def _attempt(
    definition: registry.Job[Any, Any], args: list[Any], kwargs: dict[str, Any]
) -> BaseException | None:
    """Run the job's code and return what it raised, whatever it is: ``SystemExit``,
    ``KeyboardInterrupt`` and ``GeneratorExit`` are outcomes of the job like any exception. (The
    work process's own shutdown never raises into a job: SIGTERM only sets a flag.)"""
    try:
        db_hygiene()
        with soft_timeout(definition.timeout):
            definition.func(*args, **kwargs)
    except BaseException as exc:
        return exc
    return None


def run(
    store: Store,
    claimed: Claimed,
    on_start: Callable[[float], None] | None = None,
    on_return: Callable[[], None] | None = None,
) -> Outcome:
    """Run one claimed attempt. Failures are settled here; a success is left for the caller to
    complete (it batches the completion with its next claim). ``on_start(timeout)`` runs just
    before the job's code, so a supervisor can arm its hard timeout; ``on_return()`` as soon as
    the code returned, so it completes the job even if this process dies in what follows.

    Once the job's code has returned, its outcome is final: signals, cron bookkeeping, metrics and
    the log line are isolated, so none of them can fail a success or rerun it."""
    started = time.perf_counter()
    name = "(unknown)"
    try:
        name, args, kwargs = payload.loads(claimed.record.data)
        definition = registry.get(name)
    except (PayloadError, JobNotFound) as exc:
        outcome = settle_failure(store, claimed, exc)
        report(outcome, name, claimed, exc)
        return outcome
    if on_start is not None:
        on_start(definition.timeout)
    _notify(job_started, name, claimed)
    isolated("Counting a start", lambda: metrics.started(name, claimed.queue, queue_wait(claimed)))
    error = _attempt(definition, args, kwargs)
    duration = time.perf_counter() - started
    if error is None and on_return is not None:
        on_return()
    isolated("Closing the job's database connections", db_hygiene)
    if error is None:
        outcome = Outcome.SUCCESS
        _notify(job_succeeded, name, claimed, duration=duration)
        # A garbage dj_cron or a database error: the job did succeed; its period shows as overdue.
        isolated(f"Marking periodic job {name} {claimed.id} finished", lambda: cron.finished(claimed.fields))
    else:
        _notify(job_failed, name, claimed, duration=duration, exception=error)
        outcome = settle_failure(store, claimed, error)
    report(outcome, name, claimed, error, duration)
    return outcome
