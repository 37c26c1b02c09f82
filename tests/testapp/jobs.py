"""Jobs the test suite enqueues. Each leaves a SideEffect row (or a marker file) to prove it ran."""

import os
import re
import signal
import time
from pathlib import Path

from django_jobs import PermanentError, RetryPolicy, Snooze, idempotent, job
from django_jobs.models import Batch
from django_jobs.workflows.batches import batch_callback
from django_jobs.workflows.chains import Page, chain

from .models import Item, SideEffect

FAST = RetryPolicy(max_attempts=3, base=0.05, factor=2, max_delay=0.2)


class Invalid(Exception):
    pass


@job(name="tests.record", timeout=10, retry=FAST)
def record(key: str) -> None:
    SideEffect.objects.create(key=key)


@job(name="tests.record_once", timeout=10, retry=FAST)
def record_once(key: str) -> None:
    with idempotent(f"record_once:{key}") as first:
        if first:
            SideEffect.objects.create(key=key)


@job(name="tests.always_fails", timeout=10, retry=FAST)
def always_fails(key: str) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    raise ConnectionError("upstream down")


@job(name="tests.fails_then_succeeds", timeout=10, retry=FAST)
def fails_then_succeeds(key: str, failures: int) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    if SideEffect.objects.filter(key=f"attempt:{key}").count() <= failures:
        raise ConnectionError("flaky upstream")
    SideEffect.objects.create(key=key)


@job(name="tests.invalid", timeout=10, retry=FAST, permanent=(Invalid,))
def invalid(key: str) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    raise Invalid(f"bad input {key}")


@job(name="tests.permanent", timeout=10, retry=FAST)
def permanent(key: str) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    raise PermanentError("voided")


@job(name="tests.sleepy", timeout=1, retry=RetryPolicy(max_attempts=2, base=0.05, factor=1, max_delay=0.05))
def sleepy(key: str, seconds: float) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    time.sleep(seconds)
    SideEffect.objects.create(key=key)


@job(name="tests.stubborn", timeout=1, retry=RetryPolicy(max_attempts=2, base=0.05, factor=1, max_delay=0.05))
def stubborn(key: str) -> None:
    """Ignores the soft timeout: only the supervisor's hard kill stops it."""
    SideEffect.objects.create(key=f"attempt:{key}")
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    time.sleep(30)


@job(name="tests.kill_once", timeout=10, retry=FAST)
def kill_once(key: str, marker: str) -> None:
    """Kills its own work process the first time, as an OOM kill would."""
    SideEffect.objects.create(key=f"attempt:{key}")
    path = Path(marker)
    if not path.exists():
        path.write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    SideEffect.objects.create(key=key)


@job(name="tests.new_name", aliases=["tests.old_name"], timeout=10, retry=FAST)
def renamed(key: str) -> None:
    SideEffect.objects.create(key=key)


@job(name="tests.echo_types", timeout=10, retry=FAST)
def echo_types(key: str, **values: object) -> None:
    SideEffect.objects.create(
        key=f"{key}:{sorted((k, type(v).__name__, repr(v)) for k, v in values.items())}"
    )


@job(name="tests.slow", timeout=30, retry=FAST)
def slow(key: str, seconds: float) -> None:
    """Records when each attempt starts and ends, so tests can see overlaps and recoveries."""
    SideEffect.objects.create(key=f"attempt:{key}")
    time.sleep(seconds)
    SideEffect.objects.create(key=key)


@job(name="tests.kill_always", timeout=10, retry=FAST)
def kill_always(key: str) -> None:
    """A poison job that takes its work process down on every attempt."""
    SideEffect.objects.create(key=f"attempt:{key}")
    os.kill(os.getpid(), signal.SIGKILL)


@job(
    name="tests.regex_bomb", timeout=1, retry=RetryPolicy(max_attempts=2, base=0.05, factor=1, max_delay=0.05)
)
def regex_bomb(key: str) -> None:
    """Catastrophic backtracking: minutes inside C code that never checks for signals."""
    SideEffect.objects.create(key=f"attempt:{key}")
    re.match(r"(a+)+$", "a" * 40 + "b")


SOAK = RetryPolicy(max_attempts=20, base=0.05, factor=2, max_delay=0.5)


@job(name="tests.soak", timeout=10, retry=SOAK)
def soak(key: str, seconds: float) -> None:
    """Its effect happens once however often it runs; "ran:<key>|<job id>|<attempt>", written outside
    the guard, records each attempt that got to it, so a test sees how often the job really ran."""
    from django_jobs import current_job

    SideEffect.objects.create(key=f"attempt:{key}")
    time.sleep(seconds)
    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"ran:{key}|{attempt.job_id}|{attempt.attempt}")
    with idempotent(f"soak:{key}") as first:
        if first:
            SideEffect.objects.create(key=key)


@job(name="tests.limited", timeout=10, retry=FAST, concurrency=3)
def limited(key: str, seconds: float) -> None:
    """Records its start and end, so a test can compute how many ran at once."""
    started = time.time()
    time.sleep(seconds)
    SideEffect.objects.create(key=f"{key}|{started}|{time.time()}")


@job(name="tests.rated", timeout=10, retry=FAST, rate="5/m")
def rated(key: str) -> None:
    SideEffect.objects.create(key=key)


@job(name="tests.tick", timeout=10, retry=FAST)
def tick() -> None:
    """Scheduled by tests through JOBS["CRON"]."""
    SideEffect.objects.create(key="tick")


@job(name="tests.hourly", timeout=10, retry=FAST, cron="0 * * * *", cron_catch_up="once")
def hourly() -> None:
    SideEffect.objects.create(key="hourly")


@chain(name="tests.sync_items", timeout=30, retry=SOAK)
def sync_items(cursor: int | None, *, page_size: int, pause: float = 0.0) -> Page:
    """A cursor-paginated sync: each page processes the next ``page_size`` items, once each."""
    items = list(Item.objects.filter(pk__gt=cursor or 0).order_by("pk")[:page_size])
    for item in items:
        SideEffect.objects.create(key=f"item:{item.pk}")
    time.sleep(pause)
    return Page(next_cursor=items[-1].pk if len(items) == page_size else None, items=len(items))


BACKENDS: list[object] = []


@job(name="tests.which_connection", timeout=10, retry=FAST)
def which_connection() -> None:
    """Remembers the database connection each job used, for the connection-reuse test."""
    from django.db import connection

    connection.ensure_connection()
    BACKENDS.append(id(connection.connection))
    SideEffect.objects.create(key="conn")


# --- first hour as a user: testing helpers and burst -----------------------------------------------


@job(name="tests.greet", timeout=10, retry=FAST)
def greet(key: str, greeting: str = "hello") -> None:
    SideEffect.objects.create(key=f"{greeting}:{key}")


# --- names, tombstones, redaction, bounded input ------------------------------------------------


@job(name="tests.solo", aliases=["tests.solo_before_rename"], timeout=10, retry=FAST, concurrency=1)
def solo(key: str, seconds: float = 0.0) -> None:
    """Records its start and end, so a test can see whether two ever ran at once."""
    started = time.time()
    time.sleep(seconds)
    SideEffect.objects.create(key=f"{key}|{started}|{time.time()}")


@job(name="tests.hourly_quota", aliases=["tests.quota_before_rename"], timeout=10, retry=FAST, rate="1/h")
def hourly_quota(key: str) -> None:
    SideEffect.objects.create(key=key)


@job(name="tests.debounced", aliases=["tests.debounced_before_rename"], timeout=10, retry=FAST)
def debounced(key: str) -> None:
    SideEffect.objects.create(key=key)


# --- maintenance loops and dead-letter storage ------------------------------------------------


@job(name="tests.fails_with", timeout=10, retry=FAST)
def fails_with(value: str) -> None:
    """Dead-letters at once with its argument in the message (NUL and all)."""
    raise PermanentError(f"bad input: {value}")


# --- Job outcomes: whatever a job raises, or however it dies, is an outcome ---------------------

BRIEF = RetryPolicy(max_attempts=2, base=0.05, factor=1, max_delay=0.05)


class Custom(BaseException):
    """A BaseException of the job's own, as some CLI frameworks define."""


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


class Unspeakable(BaseException):
    """Neither str() nor repr() works, and both raise what would stop a careless worker."""

    def __str__(self) -> str:
        raise SystemExit(9)

    def __repr__(self) -> str:
        raise KeyboardInterrupt


class _UnreadableNotes(list[str]):
    def __iter__(self):  # type: ignore[override]
        raise RuntimeError("these notes cannot be read")


def _junk_notes() -> BaseException:
    exc = ValueError("its notes break traceback.format_exception")
    exc.__notes__ = _UnreadableNotes()  # type: ignore[attr-defined]
    return exc


RAISES = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt,
    "GeneratorExit": GeneratorExit,
    "Custom": lambda: Custom("a custom BaseException"),
    "Unprintable": lambda: Unprintable("never shown"),
    "Unspeakable": Unspeakable,
    "JunkNotes": _junk_notes,
}


@job(name="tests.raises", timeout=10, retry=BRIEF)
def raises(key: str, kind: str) -> None:
    SideEffect.objects.create(key=f"attempt:{key}")
    raise RAISES[kind]()


@job(name="tests.exits", timeout=10, retry=FAST)
def exits(key: str, code: int) -> None:
    """Ends its work process on every attempt, skipping every cleanup, as a C extension might."""
    SideEffect.objects.create(key=f"attempt:{key}")
    os._exit(code)


@job(name="tests.dies_after_return", timeout=10, retry=FAST)
def dies_after_return(key: str) -> None:
    """Succeeds; with JOBS_TEST_DIE_AFTER_RETURN set, a job_succeeded receiver then ends the process."""
    SideEffect.objects.create(key=key)


#: The process that imported the jobs: runjobs' supervisor, whose work processes are its forks.
_IMPORTED_BY = os.getpid()


def _end_the_process(sender: str, **kwargs: object) -> None:
    if sender == "tests.dies_after_return" and os.getpid() != _IMPORTED_BY:  # a work process only
        os._exit(1)


if os.environ.get("JOBS_TEST_DIE_AFTER_RETURN"):
    from django_jobs.signals import job_succeeded

    job_succeeded.connect(_end_the_process, dispatch_uid="tests.end_the_process")

if os.environ.get("JOBS_TEST_BROKEN_START"):
    # A work process that dies before it can take a job: a broken start-up, fatal to runjobs.
    os.register_at_fork(after_in_child=lambda: os._exit(1))


# --- Redis limits and frozen Redis -----------------------------------------------------------------


@job(name="tests.lifeline", timeout=60, retry=FAST)
def lifeline(path: str, seconds: float) -> None:
    """Appends "<pid> <time>" to ``path`` every 50 ms while it runs, then "<pid> done": each
    attempt's lifetime can be read back, to show that two attempts never overlapped."""
    end = time.monotonic() + seconds
    with open(path, "a") as marks:
        while time.monotonic() < end:
            marks.write(f"{os.getpid()} {time.time()}\n")
            marks.flush()
            time.sleep(0.05)
        marks.write(f"{os.getpid()} done\n")


@job(name="tests.note_context", timeout=10, retry=FAST)
def note_context(key: str, failures: int = 0) -> None:
    """Records what current_job() says, then fails its first ``failures`` attempts."""
    from django_jobs import current_job

    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"{key}:{attempt.job_id}:{attempt.name}:{attempt.queue}:{attempt.attempt}")
    if attempt.attempt <= failures:
        raise ConnectionError("flaky upstream")


ONCE = RetryPolicy(max_attempts=1, base=0.05, factor=1, max_delay=0.05)


@job(name="tests.compute", timeout=10, retry=FAST, store_result=True)
def compute(key: str, failures: int = 0) -> dict[str, object]:
    """Fails its first ``failures`` attempts, then returns a JSON value."""
    SideEffect.objects.create(key=f"attempt:{key}")
    if SideEffect.objects.filter(key=f"attempt:{key}").count() <= failures:
        raise ConnectionError("flaky upstream")
    return {"key": key, "values": [1, 2.5, None, True]}


@job(name="tests.not_json", timeout=10, retry=FAST, store_result=True)
def not_json(key: str) -> object:
    SideEffect.objects.create(key=f"attempt:{key}")
    return {1, 2}  # a set is not JSON


@job(name="tests.async_compute", timeout=5, retry=FAST, store_result=True)
async def async_compute(key: str, delay: float = 0.0) -> dict[str, object]:
    """An async job: awaits, writes through the async ORM, and sees its attempt."""
    import asyncio

    from django_jobs import current_job

    await asyncio.sleep(delay)
    await SideEffect.objects.acreate(key=key)
    attempt = current_job()
    return {"key": key, "attempt": attempt.attempt if attempt else None}


@job(name="tests.async_overrun", timeout=0.5, retry=ONCE)
async def async_overrun(key: str) -> None:
    """Awaits far past its timeout: cancelled on its event loop."""
    import asyncio

    from django_jobs.core.connections import get_connection

    try:
        await asyncio.sleep(30)
    finally:  # runs: the cancel unwinds the coroutine (the sync ORM is off limits on an event loop)
        get_connection("default").rpush("tests:async_unwound", key)


@job(name="tests.async_blocks", timeout=0.5, retry=ONCE)
async def async_blocks(key: str) -> None:
    """Blocks its event loop with sync code past its timeout: only the alarm or the kill stops it."""
    time.sleep(30)


@job(name="tests.async_nap", timeout=10, retry=FAST)
async def async_nap(key: str, seconds: float) -> None:
    """Awaits ``seconds``; records each attempt's start ("attempt:<key>|<attempt>|<epoch>") and its
    end ("<key>|<start epoch>|<end epoch>"), so a test sees overlaps, re-runs and attempt counts."""
    import asyncio

    from django_jobs import current_job

    started, attempt = time.time(), current_job()
    await SideEffect.objects.acreate(key=f"attempt:{key}|{attempt.attempt if attempt else 0}|{started}")
    await asyncio.sleep(seconds)
    await SideEffect.objects.acreate(key=f"{key}|{started}|{time.time()}")


FAILOVER = RetryPolicy(max_attempts=10, base=0.05, factor=2, max_delay=0.5)


@job(name="tests.failover", timeout=10, retry=FAILOVER)
def failover(key: str, failures: int = 0, seconds: float = 0.0) -> None:
    """Records every run; fails its first ``failures`` runs; its side effect happens once."""
    SideEffect.objects.create(key=f"run:{key}")
    time.sleep(seconds)
    if SideEffect.objects.filter(key=f"run:{key}").count() <= failures:
        raise ConnectionError("flaky upstream")
    with idempotent(f"failover:{key}") as first:
        if first:
            SideEffect.objects.create(key=key)


@job(name="tests.failover_limited", timeout=10, retry=FAILOVER, concurrency=2)
def failover_limited(key: str, seconds: float = 0.02) -> None:
    """As ``failover``, under a concurrency limit, so its slots must converge after a failover."""
    failover(key, 0, seconds)


# --- A host cut off from the network ---------------------------------------------------------------


@job(name="tests.cut_off", timeout=60, retry=FAILOVER)
def cut_off(key: str, marks: str, first: float, then: float = 0.2) -> None:
    """Runs ``first`` seconds on its first attempt (or until a file ``<marks>.go`` appears) and
    ``then`` on later ones, appending "<runjobs pid> <time>" to ``marks`` every 50 ms meanwhile, so a
    test can tell which runjobs ran each attempt and that no two overlapped. Then it records that an
    attempt ran to its end ("end:<key>"), and its side effect, once however often it runs."""
    from django_jobs import current_job

    attempt = current_job()
    end = time.monotonic() + (first if attempt is not None and attempt.attempt == 1 else then)
    go = Path(f"{marks}.go")
    with open(marks, "a") as lines:
        while True:
            lines.write(f"{os.getppid()} {time.time()}\n")
            lines.flush()
            if time.monotonic() >= end or go.exists():
                break
            time.sleep(0.05)
    SideEffect.objects.create(key=f"end:{key}")
    with idempotent(f"cut_off:{key}") as first_time:
        if first_time:
            SideEffect.objects.create(key=key)


@job(name="tests.cut_off_limited", timeout=60, retry=FAILOVER, concurrency=1)
def cut_off_limited(key: str, marks: str, first: float, then: float = 0.2) -> None:
    """As ``cut_off``, one at a time across every runjobs: its slot must be free again after a partition."""
    cut_off(key, marks, first, then)


@job(name="tests.cut_off_result", timeout=60, retry=FAILOVER, store_result=True)
def cut_off_result(key: str, marks: str, first: float, then: float = 0.2) -> int:
    """As ``cut_off``, and returns the pid of the runjobs that ran it: which attempt's completion landed."""
    cut_off(key, marks, first, then)
    return os.getppid()


@job(name="tests.cut_off_refused", timeout=3600, retry=FAILOVER)
def cut_off_refused(key: str) -> None:
    """Fails for good at once; its timeout is long enough for its dead-lettering to wait out any cut."""
    raise PermanentError(f"refused: {key}")


# --- Cancellation -----------------------------------------------------------------------------------


@job(name="tests.polite", timeout=60, retry=FAST)
def polite(key: str, seconds: float = 30.0) -> None:
    """Works in small steps and stops, as asked, once its cancel is requested."""
    from django_jobs import JobCancelled, cancel_requested

    SideEffect.objects.create(key=f"attempt:{key}")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cancel_requested():
            SideEffect.objects.create(key=f"stopped:{key}")
            raise JobCancelled(f"{key} stopped as asked")
        time.sleep(0.05)
    SideEffect.objects.create(key=key)


@job(name="tests.deaf", timeout=60, retry=FAST)
def deaf(key: str, seconds: float = 30.0) -> None:
    """Never checks for a cancel and ignores the signals it could be sent: only a kill stops it."""
    SideEffect.objects.create(key=f"attempt:{key}")
    for signum in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
    SideEffect.objects.create(key=key)


@job(name="tests.cancels_itself", timeout=10, retry=FAST)
def cancels_itself(key: str, then: str = "stop") -> None:
    """Asks for its own cancel (as another process would), then stops as asked (``then="stop"``),
    fails (``"fail"``), snoozes (``"snooze"``) or finishes its work regardless (``"finish"``)."""
    from django_jobs import JobCancelled, cancel, cancel_requested, current_job

    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"attempt:{key}")
    SideEffect.objects.create(key=f"{key}:{cancel(attempt.job_id)}:{cancel_requested()}")
    if then == "stop":
        raise JobCancelled("stopped as asked")
    if then == "fail":
        raise ConnectionError("upstream down while stopping")
    if then == "snooze":
        raise Snooze(0.05)
    SideEffect.objects.create(key=key)


# --- limits per key (limit_key) -----------------------------------------------------------------


@job(
    name="tests.per_account",
    aliases=["tests.per_account_before_rename"],
    timeout=10,
    retry=FAST,
    concurrency=1,
    limit_key=lambda account, *_, **__: account,
)
def per_account(account: str, key: str, seconds: float = 0.0, fail: bool = False) -> None:
    """One at a time per account; records its account, key, start and end, so a test can see the
    order and whether two of one account ever ran at once. ``fail``: a retryable failure instead."""
    started = time.time()
    time.sleep(seconds)
    if fail:
        SideEffect.objects.create(key=f"attempt:{account}|{key}")
        raise ConnectionError("upstream down")
    SideEffect.objects.create(key=f"{account}|{key}|{started}|{time.time()}")


@job(
    name="tests.per_account_rated", timeout=10, retry=FAST, rate="2/m", limit_key=lambda account, key: account
)
def per_account_rated(account: str, key: str) -> None:
    SideEffect.objects.create(key=f"{account}|{key}")


# --- Snooze and expiry ------------------------------------------------------------------------------


@job(name="tests.snoozer", timeout=10, retry=FAST)
def snoozer(key: str, times: int, seconds: float = 0.05, returned: bool = False) -> object:
    """Snoozes its first ``times`` runs (raising ``Snooze``, or returning it), then does its work.
    Each run records the attempt number current_job() saw, so a test can see no attempt was spent."""
    from django_jobs import current_job

    attempt = current_job()
    SideEffect.objects.create(key=f"run:{key}:{attempt.attempt if attempt else 0}")
    if SideEffect.objects.filter(key__startswith=f"run:{key}:").count() <= times:
        if returned:
            return Snooze(seconds)
        raise Snooze(seconds)
    SideEffect.objects.create(key=key)
    return None


@job(name="tests.snoozes_forever", timeout=10, retry=FAST, max_snoozes=3)
def snoozes_forever(key: str, seconds: float = 0.05) -> None:
    """A partner that always answers 429: snoozes on every run, until its cap dead-letters it."""
    SideEffect.objects.create(key=f"run:{key}")
    raise Snooze(seconds)


BAD_SNOOZES: dict[str, object] = {
    "negative": -1,
    "nan": float("nan"),
    "infinite": float("inf"),
    "a year": 365 * 86400,
    "text": "30",
    "bool": True,
}


@job(name="tests.snoozes_badly", timeout=10, retry=FAST)
def snoozes_badly(key: str, kind: str) -> None:
    """Asks for a snooze Snooze() refuses (``BAD_SNOOZES``): its attempt fails like any other."""
    SideEffect.objects.create(key=f"attempt:{key}")
    raise Snooze(BAD_SNOOZES[kind])  # type: ignore[arg-type]


@job(name="tests.reminder", timeout=10, retry=FAST, expires=2)
def reminder(key: str) -> None:
    """Useless two seconds after its enqueue: a run that has not started by then is dropped."""
    SideEffect.objects.create(key=key)


@chain(name="tests.snoozy_pages", timeout=30, retry=FAST)
def snoozy_pages(cursor: int | None, *, page_size: int, returned: bool = False) -> Page | Snooze:
    """``sync_items`` whose every page snoozes on its first run, after writing (the writes roll
    back with the page). Runs are counted in Redis, which no rollback undoes."""
    from django_jobs.core.connections import get_connection

    items = list(Item.objects.filter(pk__gt=cursor or 0).order_by("pk")[:page_size])
    for item in items:
        SideEffect.objects.create(key=f"item:{item.pk}")
    if get_connection("default").incr(f"tests:snoozy_pages:{cursor}") == 1:
        if returned:
            return Snooze(0.05)
        raise Snooze(0.05)
    return Page(next_cursor=items[-1].pk if len(items) == page_size else None, items=len(items))


# --- Batches -------------------------------------------------------------------------------------


@batch_callback(name="tests.batch_done", timeout=10, retry=SOAK)
def batch_done(batch: Batch, label: str) -> None:
    """Records each run with what the batch says: the framework runs it once per batch and kind. Its
    retries outlast a chaos test's kills (each killed attempt counts), as the members' do."""
    SideEffect.objects.create(key=f"{label}|{batch.pk}|{batch.status}|{batch.succeeded}|{batch.ended}")


@batch_callback(name="tests.batch_flaky_done", timeout=10, retry=FAST)
def batch_flaky_done(batch: Batch, label: str) -> None:
    """Fails its first run after writing (the write rolls back with the run mark), then succeeds."""
    from django_jobs.core.connections import get_connection

    SideEffect.objects.create(key=f"{label}|{batch.pk}")
    if get_connection("default").incr(f"tests:flaky:{batch.pk}") == 1:
        raise ConnectionError("flaky upstream")


@job(name="tests.needs_fix", timeout=10, retry=SOAK)
def needs_fix(key: str) -> None:
    """Dead-lettered at once until a "fixed:<key>" row exists (an operator's data fix); then done once.
    Its retries outlast a chaos test's kills, so only the missing fix dead-letters it."""
    SideEffect.objects.create(key=f"attempt:{key}")
    if not SideEffect.objects.filter(key=f"fixed:{key}").exists():
        raise PermanentError(f"{key} needs a fix")
    with idempotent(f"needs_fix:{key}") as first:
        if first:
            SideEffect.objects.create(key=key)


@job(name="tests.gate", timeout=30, retry=SOAK)
def gate(key: str, path: str) -> None:
    """Waits (up to 20 s an attempt) for ``path`` to exist, then does its side effect once."""
    SideEffect.objects.create(key=f"attempt:{key}")
    end = time.monotonic() + 20
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise ConnectionError(f"{path} did not appear")
        time.sleep(0.05)
    with idempotent(f"gate:{key}") as first:
        if first:
            SideEffect.objects.create(key=key)


# --- connection hygiene: what a job leaves behind on its connections -------------------------------


@job(name="tests.leaves_atomic_open", timeout=10, retry=ONCE)
def leaves_atomic_open(key: str) -> None:
    """Returns from inside an ``atomic()`` block it never exits: its row is never committed."""
    from django.db import transaction

    transaction.atomic().__enter__()
    SideEffect.objects.create(key=key)


@job(name="tests.async_leaves_atomic_open", timeout=10, retry=ONCE)
async def async_leaves_atomic_open(key: str) -> None:
    """The same through the async ORM: the open block is on the connection of its sync thread."""
    from asgiref.sync import sync_to_async
    from django.db import transaction

    await sync_to_async(transaction.atomic().__enter__)()
    await SideEffect.objects.acreate(key=key)


@job(name="tests.async_record", timeout=10, retry=FAST)
async def async_record(key: str) -> None:
    await SideEffect.objects.acreate(key=key)


@job(name="tests.session_start", timeout=10, retry=FAST)
def session_start(key: str) -> None:
    """Records when its PostgreSQL session began, as ``<key>:<epoch seconds>``."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT extract(epoch FROM backend_start) FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        )
        SideEffect.objects.create(key=f"{key}:{cursor.fetchone()[0]}")


# --- The lifecycle state machine (tests/fuzz/test_lifecycle_machine.py) ----------------------------
# It drives the store itself (claims, settles, reaps) and never runs these bodies: what matters is
# their registration: a retry due within a millisecond, a snooze cap, and a limit per account.

AT_ONCE = RetryPolicy(max_attempts=3, base=0.001, factor=1, max_delay=0.001)


@job(name="tests.machine", timeout=10, retry=AT_ONCE, max_snoozes=2)
def machine(key: str, account: str = "") -> None:
    SideEffect.objects.create(key=key)


@job(
    name="tests.machine_keyed",
    timeout=10,
    retry=AT_ONCE,
    max_snoozes=2,
    concurrency=1,
    limit_key=lambda key, account: account,
)
def machine_keyed(key: str, account: str) -> None:
    """One attempt at a time per account: the machine checks that no two ever hold a lease at once."""
    SideEffect.objects.create(key=key)


# --- Verifying jobs (django_jobs.testing.verify_idempotent) -----------------------------------------


@job(name="tests.upsert_item", timeout=10, retry=FAST)
def upsert_item(name: str) -> None:
    """Only an upsert: the second run writes the same row again."""
    Item.objects.update_or_create(name=name, defaults={"name": name})


@job(name="tests.mark_item", timeout=10, retry=FAST)
def mark_item(name: str) -> None:
    """Changes an existing row each run: not idempotent, though it inserts nothing."""
    from django.db.models import Value
    from django.db.models.functions import Concat

    Item.objects.filter(name__startswith=name).update(name=Concat("name", Value("!")))


@job(name="tests.mail_invoice", timeout=10, retry=FAST)
def mail_invoice(to: str, once: bool = False) -> None:
    """Sends a mail; ``once``: at most once, guarded by an idempotency key."""
    from django.core.mail import send_mail

    with idempotent(f"mail_invoice:{to}") as first:
        if first or not once:
            send_mail("Your invoice", "Attached.", "shop@example.com", [to])


@job(name="tests.enqueue_follow_up", timeout=10, retry=FAST)
def enqueue_follow_up(key: str, unique: bool = False) -> None:
    """Enqueues the next job; ``unique``: under a unique key, so a second enqueue is dropped."""
    (record.options(unique_key=f"follow-up:{key}") if unique else record).enqueue(key)


@job(name="tests.charge_card", timeout=10, retry=FAST)
def charge_card(order: str, keyed: bool = False) -> None:
    """Calls a payment gateway (declared as an outside effect), with or without an idempotency key."""
    from django_jobs.testing import effect

    effect(f"a charge of order {order} at the payment gateway", key=f"order-{order}" if keyed else None)


# --- Crash safety (django_jobs.testing.verify_crash_safe) -------------------------------------------


@job(name="tests.mail_then_record", timeout=10, retry=FAST)
def mail_then_record(to: str) -> None:
    """Mails before its guarded write commits: a crash in between mails again on the retry."""
    from django.core.mail import send_mail

    send_mail("Your receipt", "Thanks.", "shop@example.com", [to])
    with idempotent(f"mail_then_record:{to}") as first:
        if first:
            SideEffect.objects.create(key=to)


@job(name="tests.enqueue_then_record", timeout=10, retry=FAST)
def enqueue_then_record(key: str, unique: bool = False) -> None:
    """Enqueues a follow-up, then records under a guard; ``unique``: the follow-up has a unique key."""
    enqueue_follow_up(key, unique=unique)
    record_once(key)


@job(name="tests.charge_then_record", timeout=10, retry=FAST)
def charge_then_record(order: str, keyed: bool = False) -> None:
    """Charges inside its guarded transaction, before the commit: a crash there charges again unless
    the gateway dedups by the ``keyed`` idempotency key."""
    with idempotent(f"charge_then_record:{order}") as first:
        if first:
            charge_card(order, keyed=keyed)
            SideEffect.objects.create(key=order)


@job(name="tests.transfer", timeout=10, retry=FAST)
def transfer(key: str, atomic: bool = False) -> None:
    """Two writes in two transactions: safe only if it never dies between them. ``atomic``: one
    transaction, guarded, which is safe anywhere."""
    from django.db import transaction

    if atomic:
        with idempotent(f"transfer:{key}") as first:
            if first:
                SideEffect.objects.create(key=f"{key}:debit")
                SideEffect.objects.create(key=f"{key}:credit")
        return
    with transaction.atomic():
        SideEffect.objects.create(key=f"{key}:debit")
    with transaction.atomic():
        SideEffect.objects.create(key=f"{key}:credit")


# --- claims in batches ---------------------------------------------------------------------------


@job(name="tests.step", timeout=10, retry=FAST)
def step(key: str) -> None:
    """A short job that records each attempt's number: a batch's job handed back runs again unspent."""
    from django_jobs import current_job

    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"step:{key}|{attempt.attempt}")


@job(name="tests.stall", timeout=30, retry=FAST)
def stall(key: str, seconds: float) -> None:
    """Records each attempt's number like ``step``, then stalls ``seconds`` on its first attempt."""
    from django_jobs import current_job

    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"step:{key}|{attempt.attempt}")
    if attempt.attempt == 1:
        time.sleep(seconds)


@job(name="tests.quick", timeout=10, retry=FAST)
def quick(n: int) -> None:
    """Does nothing, touching no database: what sets a work process's pace to that of short jobs
    however slow the machine's disk is at the moment."""


@job(name="tests.stall_past_timeout", timeout=3, retry=FAST)
def stall_past_timeout(key: str) -> None:
    """``stall`` for 30 s with its soft timeout's signal ignored, past its 3 s timeout: killed (3 s:
    a loaded machine still sees the jobs of its batch held before the kill)."""
    from django_jobs import current_job

    attempt = current_job()
    assert attempt is not None
    SideEffect.objects.create(key=f"step:{key}|{attempt.attempt}")
    if attempt.attempt == 1:
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(30)
