"""One attempt of one job: decode, look up by name, run under a timeout, and settle the outcome."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.db import connections, reset_queries
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.conf import jobs_settings
from django_jobs.core import invocation, payload, registry, tracing
from django_jobs.core.context import JobContext, binding, running
from django_jobs.core.outcomes import AttemptEnded, Judgement, Outcome, Settling, isolated, publish, send
from django_jobs.exceptions import (
    JobCancelled,
    JobNotFound,
    JobTimeout,
    PayloadError,
    PayloadTooLarge,
    Snooze,
    SnoozedTooOften,
    TransactionLeftOpen,
    WorkerLost,
)
from django_jobs.models import DeadLetter
from django_jobs.policy import Verdict, classify
from django_jobs.signals import job_started
from django_jobs.store import Claimed, Finished, Settled
from django_jobs.store.lifecycle import F
from django_jobs.telemetry import metrics
from django_jobs.telemetry.logs import exception_path, exception_text, exception_traceback

logger = logging.getLogger("django_jobs.worker")

#: The claim of the attempt running in this context: the job's record as the claim found it, for code
#: that describes the running attempt beyond ``current_job()`` (the Django Tasks backend's TaskResult).
_claimed: ContextVar[Claimed | None] = ContextVar("django_jobs_running_claim", default=None)


def current_claim() -> Claimed | None:
    """The claim of the attempt running in this context, or None outside a worker's attempt."""
    return _claimed.get()


def _judge(exc: BaseException, claimed: Claimed, definition: registry.Job[Any, Any] | None) -> Judgement:
    path, message, text = exception_path(exc), exception_text(exc), exception_traceback(exc)
    if definition is None:
        reason = DeadLetter.Reason.UNDECODABLE
        if isinstance(exc, JobNotFound):
            reason = DeadLetter.Reason.UNREGISTERED
        elif isinstance(exc, PayloadTooLarge):  # a decompression bomb: quarantined, never inflated
            reason = DeadLetter.Reason.UNREADABLE
        return Judgement(path, message, text, Verdict.DEAD, reason, exc)
    verdict = classify(exc, attempt=claimed.attempt, policy=definition.policy, permanent=definition.permanent)
    exhausted = claimed.attempt >= definition.policy.max_attempts
    reason = (
        DeadLetter.Reason.WORKER_LOST
        if isinstance(exc, WorkerLost) and exhausted
        else (DeadLetter.Reason.EXHAUSTED if exhausted else DeadLetter.Reason.PERMANENT)
    )
    if isinstance(exc, SnoozedTooOften):
        reason = DeadLetter.Reason.SNOOZED
    return Judgement(path, message, text, verdict, reason, exc)


def _history(claimed: Claimed, failed: Judgement) -> list[dict[str, Any]]:
    history = claimed.record.history  # garbage in a job's own field must not stop its settling
    entry = {
        "attempt": claimed.attempt,
        "at": dt.datetime.now(dt.UTC).isoformat(),
        "exception": failed.exception,
        "message": failed.message[:500],
        "traceback": failed.traceback[-4000:],  # the innermost frames: where it failed
    }
    return [*history, entry][-25:]


def _definition(claimed: Claimed) -> registry.Job[Any, Any] | None:
    try:
        return registry.get(payload.loads(claimed.record.data)[0])
    except (JobNotFound, PayloadError):
        return None


def _retry_outcome(exc: BaseException, lost: bool) -> Outcome:
    if lost or isinstance(exc, WorkerLost):  # reaped after its lease expired, or its process died
        return Outcome.LOST
    return Outcome.TIMEOUT if isinstance(exc, JobTimeout) else Outcome.RETRY


def _plan(
    exc: BaseException,
    claimed: Claimed,
    failed: Judgement,
    definition: registry.Job[Any, Any] | None,
    lost: bool,
) -> tuple[float | None, Outcome]:
    """What to ask of the store: (seconds until the retry, or None) and the outcome that reports."""
    if isinstance(exc, JobCancelled):
        return None, Outcome.CANCELLED
    if failed.verdict is Verdict.RETRY and definition is not None:
        # A lost worker's job goes straight back: the crash was not the job's failure to back off from.
        delay = 0.0 if isinstance(exc, WorkerLost) else definition.policy.delay(claimed.attempt)
        return delay, _retry_outcome(exc, lost)
    return None, Outcome.DEAD


def settle_failure(
    store: Settling,
    claimed: Claimed,
    exc: BaseException,
    *,
    lost: bool = False,
    name: str | None = None,
    duration: float | None = None,
    elsewhere: bool = False,
) -> AttemptEnded:
    """Retry with backoff, move to "dying" for dead-lettering, or end cancelled (``JobCancelled``, or
    any failure once the job's cancel was requested: the store decides, atomically), and return the
    attempt's end for the caller to :func:`~django_jobs.core.outcomes.publish` (whose dead-letter
    subscriber writes the row). ``lost``: the lease already moved to LOST (worker died). ``name``
    defaults to the job hash's. ``elsewhere``: settled outside the process that ran it (so is a lost one)."""
    definition = _definition(claimed)
    failed = _judge(exc, claimed, definition)
    history = _history(claimed, failed)
    fields = {
        F.HISTORY: json.dumps(history),
        "exc_info": failed.traceback[-20_000:],
        F.REASON: failed.reason,
        F.EXCEPTION: failed.exception,
        F.MESSAGE: failed.message[:2000],
    }
    delay, outcome = _plan(exc, claimed, failed, definition, lost)
    settled = store.fail(
        claimed.token, claimed.queue, delay=delay, fields=fields, lost=lost,
        cancel=outcome is Outcome.CANCELLED, finished_ttl=jobs_settings.FINISHED_TTL,
        scope=registry.limit_scope(claimed.record),
    )  # fmt: skip
    if settled is Settled.FENCED:
        # The lease was taken back (a reaper, after the lease expired): that settling was published.
        logger.warning(
            "Job %s: its attempt under lease %s was fenced off; another attempt owns it now.",
            definition.name if definition else "(unknown)",
            claimed.token,
        )
    elif settled is Settled.CANCELLED:
        outcome = Outcome.CANCELLED
    reported = name if name is not None else claimed.record.name
    bury, retry_in = settled is Settled.DONE and delay is None, delay if settled is Settled.DONE else None
    fenced = settled is Settled.FENCED
    return _ended(
        store, claimed, reported, outcome, duration, exc, failed, history, bury, retry_in, fenced,
        elsewhere=elsewhere or lost,
    )  # fmt: skip


def settle_snooze(
    store: Settling, claimed: Claimed, snooze: Snooze, definition: registry.Job[Any, Any], duration: float
) -> AttemptEnded:
    """Reschedule the job ``snooze.seconds`` from now without spending the attempt (outcome
    ``snoozed``), or, past its snooze cap, dead-letter it with reason "snoozed". Fenced by the lease
    like a failure: a snooze from an attempt that lost its lease changes nothing and is published nowhere."""
    if claimed.record.snoozes >= definition.snooze_cap:
        too_often = SnoozedTooOften(
            f"Job {definition.name} snoozed {claimed.record.snoozes} times, as often as its max_snoozes "
            f"(or JOBS['MAX_SNOOZES']) allows; snoozing once more ({snooze.seconds:g} s) dead-letters it."
        )
        too_often.__cause__ = snooze  # its traceback shows where the job snoozed
        return settle_failure(store, claimed, too_often, name=definition.name, duration=duration)
    scope = registry.limit_scope(claimed.record)
    settled = store.snooze(claimed.token, claimed.queue, snooze.seconds, jobs_settings.FINISHED_TTL, scope)
    fenced = settled is Settled.FENCED
    if fenced:
        logger.warning(
            "Job %s: its attempt under lease %s was fenced off; its snooze changed nothing.",
            definition.name, claimed.token,
        )  # fmt: skip
    outcome = Outcome.CANCELLED if settled is Settled.CANCELLED else Outcome.SNOOZED
    retry_in = snooze.seconds if settled is Settled.DONE else None
    name = definition.name
    return _ended(store, claimed, name, outcome, duration, snooze, retry_in=retry_in, fenced=fenced)


def publish_expired(store: Settling, dropped: Sequence[Claimed]) -> None:
    """Publish the end of each job a claim dropped unrun because it expired before it started
    (outcome ``expired``, attempt 0): counted and logged, never dead-lettered."""
    for claimed in dropped:
        publish(_ended(store, claimed, claimed.record.name, Outcome.EXPIRED, None, None))


def completion(ended: AttemptEnded) -> Finished | None:
    """What the next claim completes after the attempt ``ended``: its success, with its return value
    and the key whose slot it frees (``limit_key``); None after any other outcome (already settled)."""
    if ended.outcome is not Outcome.SUCCESS:
        return None
    claimed = ended.claimed
    return Finished(claimed.token, claimed.queue, ended.result, registry.limit_scope(claimed.record))


def succeeded(store: Settling, claimed: Claimed) -> AttemptEnded:
    """The end of an attempt whose code returned and whose work process died before publishing it,
    completed by the supervisor: its return value died with the process."""
    return _ended(store, claimed, claimed.record.name, Outcome.SUCCESS, None, None, elsewhere=True)


def cancelled(store: Settling, claimed: Claimed, exc: BaseException) -> AttemptEnded:
    """The end of an attempt the store already settled as cancelled outside the work process (a job
    handed back at shutdown whose cancel had been requested)."""
    return _ended(store, claimed, claimed.record.name, Outcome.CANCELLED, None, exc, elsewhere=True)


def _ended(
    store: Settling,
    claimed: Claimed,
    name: str,
    outcome: Outcome,
    duration: float | None,
    exc: BaseException | None,
    judgement: Judgement | None = None,
    history: list[dict[str, Any]] | None = None,
    bury: bool = False,
    retry_in: float | None = None,
    fenced: bool = False,
    result: str | None = None,
    elsewhere: bool = False,
) -> AttemptEnded:
    return AttemptEnded(
        name, claimed.id, claimed.queue, claimed.attempt, outcome, duration, exc, claimed, store,
        judgement, tuple(history or ()), bury, retry_in, result=result, fenced=fenced, elsewhere=elsewhere,
    )  # fmt: skip


class _Alarm:
    """The soft timeout's state: the running attempt's seconds (for :func:`expire`'s message), and
    whether this process keeps :func:`expire` installed between attempts (a work process)."""

    seconds = 0.0
    kept = False


def _forget_alarm() -> None:
    _Alarm.kept = False  # a process forked from a keeper keeps nothing until it says so


os.register_at_fork(after_in_child=_forget_alarm)


def expire(signum: int, frame: Any) -> None:
    """The SIGALRM handler of :func:`soft_timeout`: raise JobTimeout inside the job's code."""
    raise JobTimeout(f"Job ran longer than its timeout of {_Alarm.seconds:g} s.")


def keep_alarm() -> None:
    """Say this process keeps :func:`expire` installed, setting it again after any job that replaced
    it (``WorkProcess.install_signals``): :func:`soft_timeout` then swaps no handler, as
    ``signal.signal`` and ``getsignal`` cost more than the rest of it. A process it forks does not."""
    _Alarm.kept = True


def soft_timeout(seconds: float) -> contextlib.AbstractContextManager[None]:
    """Raise JobTimeout inside the job after ``seconds``; the supervisor's hard kill backs it up.
    Outside a work process (see :func:`keep_alarm`), the handler found is put back afterwards, and so
    is an alarm that was set (a test's own timeout, an outer job's in immediate mode), for what is
    left of it: at once if it fell due meanwhile."""
    return _SoftTimeout(seconds)


class _SoftTimeout(contextlib.AbstractContextManager[None]):
    """:func:`soft_timeout`'s block: a class, not a generator, as every attempt enters one."""

    __slots__ = ("armed", "outer", "previous", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.previous = None  # signals are the main thread's: no alarm here
            return
        _Alarm.seconds = self.seconds
        self.previous = previous = expire if _Alarm.kept else signal.getsignal(signal.SIGALRM)
        if previous is not expire:
            signal.signal(signal.SIGALRM, expire)
        self.outer, _ = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        self.armed = time.monotonic() if self.outer else 0.0

    def __exit__(self, *exc: object) -> None:
        previous = self.previous
        if previous is None:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        if previous is not expire:
            signal.signal(signal.SIGALRM, previous)
        if self.outer:
            signal.setitimer(signal.ITIMER_REAL, max(self.outer - (time.monotonic() - self.armed), 1e-6))


def _in_transaction(conn: BaseDatabaseWrapper) -> bool:
    """Whether ``conn``, an open connection, is inside a transaction. Its ``autocommit`` is read as it
    is: ``get_autocommit()`` would only connect first, and check for an event loop, on every job."""
    return conn.in_atomic_block or not conn.autocommit


def _needs_closing(conn: BaseDatabaseWrapper) -> bool:
    broken = conn.errors_occurred and not conn.is_usable()
    max_age = conn.settings_dict["CONN_MAX_AGE"]
    expired = bool(max_age) and conn.close_at is not None and time.monotonic() >= conn.close_at
    return _in_transaction(conn) or broken or expired


def _discard(conn: BaseDatabaseWrapper) -> None:
    """Close ``conn`` so that its next use reconnects, even inside an ``atomic()`` block the job
    never exited: there Django's ``close()`` keeps the closed connection, marked closed in a
    transaction, and every later query on it fails. Closing it rolls the transaction back."""
    conn.in_atomic_block, conn.atomic_blocks, conn.savepoint_ids = False, [], []
    conn.needs_rollback, conn.closed_in_transaction, conn.commit_on_exit = False, False, True
    conn.close()


def db_hygiene(
    interrupted: bool = False,
    caller: Collection[str] | None = None,
    listed: Sequence[BaseDatabaseWrapper] | None = None,
) -> None:
    """Between jobs, and before each pass of the supervisor's maintenance: drop broken or expired
    connections and a leaked transaction, keep healthy ones. Django reopens a connection only once it
    is closed, so one broken by a database outage would otherwise fail every query after it returns.
    ``interrupted``: the job's timeout cut its code short, maybe in the middle of a query (a database
    that stopped answering), which leaves its connection unable to take another: close them all.

    Unlike ``close_old_connections``, a ``CONN_MAX_AGE=0`` connection is kept while usable, so a
    worker does not reconnect for every job. It sees this thread's connections only: an ``async
    def`` job's ORM thread gets its own (:class:`OrmThread`).

    ``caller``: the attempt runs in the caller's process, not a worker's; the connections it names
    (:func:`caller_transactions`) hold the caller's transaction, such as the one Django's ``TestCase``
    wraps each test in, which is no leak: they are left as they are.

    ``listed``: this thread's connections, if the caller has just listed them (:func:`_listed`) and
    none was opened since: after a job, the list its leak check read serves here too.
    """
    for conn in _listed() if listed is None else listed:
        if caller is not None and conn.alias in caller:
            continue
        if conn.connection is not None and (interrupted or _needs_closing(conn)):
            _discard(conn)
        conn.errors_occurred = False
    if settings.DEBUG:
        reset_queries()


def _listed() -> Sequence[BaseDatabaseWrapper]:
    """This thread's connections (Django's list of them costs a job more than the checks of each)."""
    return connections.all(initialized_only=True)


def caller_transactions(listed: Sequence[BaseDatabaseWrapper] | None = None) -> frozenset[str]:
    """The connections of this thread inside a transaction now: a test's wrapping one (``TestCase``,
    pytest-django's ``db``) or the caller's own block. An attempt run in the caller's process leaves
    them to the caller (:func:`db_hygiene`): closing one would end the caller's transaction under it.
    After a job returned, the others are the transactions it left open. ``listed``: as for
    :func:`db_hygiene`."""
    return frozenset(
        conn.alias
        for conn in (_listed() if listed is None else listed)
        if conn.connection is not None and _in_transaction(conn)
    )


class OrmThread:
    """The connection hygiene of the thread an ``async def`` job's ORM calls run in: asgiref's
    thread-sensitive thread, whose connections outlive the job as the work process's own do, and
    which the attempt's own :func:`db_hygiene` never sees. ``invocation.call`` runs :meth:`before`
    and :meth:`after` there; ``leaked`` is what the job left open there."""

    def __init__(self, in_caller: bool) -> None:
        self.in_caller = in_caller
        self.caller: frozenset[str] = frozenset()
        self.leaked: frozenset[str] = frozenset()

    def before(self) -> None:
        if self.in_caller:  # a caller's transaction in that thread, if it has one, stays its own
            self.caller = caller_transactions()
        db_hygiene(caller=self.caller)

    def after(self) -> None:
        self.leaked = caller_transactions() - self.caller
        db_hygiene(caller=self.caller)


def _left_open(name: str, leaked: Collection[str]) -> TransactionLeftOpen:
    return TransactionLeftOpen(
        f"Job {name} returned inside a transaction it never ended (an atomic() block left open, or "
        f"autocommit turned off) on database {', '.join(sorted(leaked))}: its writes there were rolled "
        "back. End every atomic() block with `with`."
    )


def queue_wait(claimed: Claimed) -> float | None:
    enqueued = claimed.record.time("enqueued_at")
    if enqueued is None:
        return None
    return max((dt.datetime.now(dt.UTC) - enqueued).total_seconds(), 0.0)


def _attempt(
    definition: registry.Job[Any, Any],
    args: list[Any],
    kwargs: dict[str, Any],
    claimed: Claimed,
    caller: Collection[str] | None,
) -> tuple[BaseException | None, str | None, Sequence[BaseDatabaseWrapper] | None]:
    """Run the job's code; return what it raised, whatever it is (``SystemExit``,
    ``KeyboardInterrupt`` and ``GeneratorExit`` are outcomes of the job like any exception; the
    work process's own shutdown never raises into a job: SIGTERM only sets a flag), or the JSON of
    its return value if the job keeps results. A returned :class:`Snooze` is returned as if raised.
    Last, the connections listed once the job returned (None if it raised), for :func:`db_hygiene`."""
    alarm = definition.timeout + (invocation.ASYNC_ALARM_MARGIN if definition.is_async else 0.0)
    try:
        db_hygiene(caller=caller)
        attempt = JobContext(claimed.id, definition.name, claimed.queue, claimed.attempt)
        orm = OrmThread(caller is not None) if definition.is_async else None
        func, timeout, is_async = definition.func, definition.timeout, definition.is_async
        with running(attempt), binding(_claimed, claimed), soft_timeout(alarm):
            value = invocation.call(func, args, kwargs, timeout=timeout, is_async=is_async, tidy=orm)
        listed = _listed()
        leaked = caller_transactions(listed).difference(caller or ()) | (orm.leaked if orm else frozenset())
        if leaked:
            return _left_open(definition.name, leaked), None, listed
        if isinstance(value, Snooze):
            return value, None, listed
        result = invocation.result_json(definition.name, value) if definition.store_result else None
        return None, result, listed
    except BaseException as exc:
        return exc, None, None


def run(
    store: Settling,
    claimed: Claimed,
    on_start: Callable[[float], None] | None = None,
    on_end: Callable[[bool], None] | None = None,
    caller: Collection[str] | None = None,
) -> AttemptEnded:
    """Run one claimed attempt. Failures are settled here; a success is left for the caller to
    complete (it batches the completion with its next claim). ``on_start(timeout)`` runs just
    before the job's code, so a supervisor can arm its hard timeout; ``on_end(returned)`` as soon
    as the code returned (True: the supervisor completes the job even if this process dies in what
    follows) or raised: from then on nothing is left to stop, however long the settling takes.

    Once the job's code has returned, its outcome is final: signals, cron bookkeeping, metrics and
    the log line are isolated, so none of them can fail a success or rerun it.

    ``caller``: the attempt runs in the caller's process (``run_jobs()``, the test modes), whose
    connections named here are inside the caller's transaction (see :func:`db_hygiene`).

    With OpenTelemetry tracing on, the attempt, its outcome's subscribers included, runs in its span."""
    if not tracing.active():
        return _run(store, claimed, on_start, on_end, caller)
    with tracing.attempt(claimed) as span:
        ended = _run(store, claimed, on_start, on_end, caller)
        isolated("Recording the attempt's span", lambda: span.ended(ended))
    return ended


def _run(
    store: Settling,
    claimed: Claimed,
    on_start: Callable[[float], None] | None,
    on_end: Callable[[bool], None] | None,
    caller: Collection[str] | None,
) -> AttemptEnded:
    started = time.perf_counter()
    name = "(unknown)"
    try:
        name, args, kwargs = payload.loads(claimed.record.data)
        definition = registry.get(name)
    except (PayloadError, JobNotFound) as exc:
        ended = settle_failure(store, claimed, exc, name=name)
        publish(ended)
        return ended
    if on_start is not None:
        on_start(definition.timeout)
    send(job_started, name, claimed)
    isolated("Counting a start", lambda: metrics.started(name, claimed.queue, queue_wait(claimed)))
    error, result, listed = _attempt(definition, args, kwargs, claimed, caller)
    duration = time.perf_counter() - started
    if on_end is not None:
        on_end(error is None)
    interrupted = isinstance(error, JobTimeout)
    isolated("Closing the job's database connections", lambda: db_hygiene(interrupted, caller, listed))
    if error is None:
        ended = _ended(store, claimed, name, Outcome.SUCCESS, duration, None, result=result)
    elif isinstance(error, Snooze):
        ended = settle_snooze(store, claimed, error, definition, duration)
    else:
        ended = settle_failure(store, claimed, error, name=name, duration=duration)
    publish(ended)
    return ended
