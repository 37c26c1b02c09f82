"""Snooze, in process: a job that raises or returns ``Snooze(seconds)`` runs again after that long
without spending an attempt, at its priority; it is an outcome (counted, logged, signalled), not a
failure, until it has snoozed more often than its cap, which dead-letters it with reason "snoozed".
A snooze is fenced by the lease like a failure, a cancel still wins, and periodic runs and chains
keep their bookkeeping right."""

from __future__ import annotations

import datetime as dt
import logging
import pickle
import time
from collections.abc import Callable, Iterator

import pytest

from django_jobs import CancelResult, Snooze, SnoozedTooOften, cancel, get_job
from django_jobs.client.enqueue import Options, enqueue_calls
from django_jobs.core import registry
from django_jobs.core.execution import settle_snooze
from django_jobs.models import Chain, CronRun, DeadLetter
from django_jobs.signals import job_failed, job_retrying, job_snoozed
from django_jobs.store import LEASES, Claimed, Settled, Status, Store
from django_jobs.telemetry import stats
from django_jobs.testing import capture_jobs, immediate_jobs, run_jobs
from tests.conftest import outcome_count, wait_for
from tests.testapp import jobs
from tests.testapp.alerts import ALERTED
from tests.testapp.models import Item, SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # a cancel deletes outbox rows


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def runs(key: str) -> list[str]:
    """The attempt number each run of ``tests.snoozer`` saw, in order."""
    rows = SideEffect.objects.filter(key__startswith=f"run:{key}:").order_by("pk")
    return [row.key.rsplit(":", 1)[1] for row in rows]


def drain(until: Callable[[], object], timeout: float = 20) -> None:
    """Run what is due in process, again and again, until ``until()`` holds (snoozes wait in between)."""
    wait_for(lambda: run_jobs() >= 0 and until(), timeout=timeout)


def claim(store: Store, nonce: str = "n") -> Claimed:
    claimed = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(),
    ).claimed  # fmt: skip
    assert claimed is not None
    return claimed


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, object]]]]:
    """job_snoozed, job_failed and job_retrying, as (signal, its keyword arguments)."""
    found: list[tuple[str, dict[str, object]]] = []
    signals = {"snoozed": job_snoozed, "failed": job_failed, "retrying": job_retrying}
    for name, signal in signals.items():
        signal.connect(lambda n=name, **kw: found.append((n, kw)), weak=False, dispatch_uid=f"t-{name}")
    yield found
    for name, signal in signals.items():
        signal.disconnect(dispatch_uid=f"t-{name}")


# --- a snooze gives its attempt back ------------------------------------------------------------------


@pytest.mark.parametrize("returned", [False, True], ids=["raised", "returned"])
def test_a_snoozed_job_runs_again_later_without_spending_an_attempt(redis_db, returned):
    handle = jobs.snoozer.enqueue("a", times=2, seconds=0.3, returned=returned)
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert (state.status, state.attempts, state.snoozes, state.errors) == (Status.SCHEDULED, 0, 1, ())
    assert state.due_at is not None
    assert 0 < (state.due_at - dt.datetime.now(dt.UTC)).total_seconds() <= 0.3
    assert run_jobs() == 0  # not due yet: it waits in the scheduled set, no worker held
    drain(lambda: done("a") == 1)
    assert runs("a") == ["1", "1", "1"]  # every run was attempt 1: the snoozes spent none
    state = get_job(handle.id)
    assert (state.status, state.attempts, state.snoozes) == (Status.FINISHED, 1, 2)
    assert not DeadLetter.objects.exists()


def test_a_snooze_takes_a_timedelta_and_get_job_shows_when_it_runs_again(redis_db):
    handle = jobs.record.enqueue("x")
    store = Store.of(redis_db)
    claimed = claim(store)  # as a worker would, then its job snoozes for a minute
    ended = settle_snooze(store, claimed, Snooze(dt.timedelta(minutes=1)), jobs.record, 0.01)
    assert (ended.outcome.value, ended.retry_in) == ("snoozed", 60.0)
    state = get_job(handle.id)
    assert state.status is Status.SCHEDULED and state.due_at is not None
    assert 58 < (state.due_at - dt.datetime.now(dt.UTC)).total_seconds() <= 60


def test_a_snoozed_job_keeps_its_priority(redis_db):
    handle = jobs.snoozer.options(priority=7).enqueue("p", times=1, seconds=0.05)
    assert run_jobs() == 1
    assert redis_db.zscore("rq:scheduled:default", handle.id) is not None
    time.sleep(0.1)
    Store.of(redis_db).maintain(["default"])  # promoted: back among the ready jobs of priority 7
    assert redis_db.zscore("djjobs:prio:default:high", handle.id) is not None
    assert redis_db.llen("rq:queue:default") == 0
    first = jobs.record.options(priority=3).enqueue("behind")
    assert run_jobs() == 2
    assert SideEffect.objects.filter(key__in=["p", "behind"]).order_by("pk")[0].key == "p"
    assert get_job(first.id).status is Status.FINISHED


# --- an outcome, not a failure ------------------------------------------------------------------------


def test_a_snooze_is_counted_logged_and_signalled_but_no_failure(redis_db, heard, caplog):
    before = outcome_count("tests.snoozer", "snoozed")
    handle = jobs.snoozer.enqueue("s", times=1, seconds=0.25)
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        assert run_jobs() == 1
    assert outcome_count("tests.snoozer", "snoozed") == before + 1
    assert [(name, kw["job_id"], kw["attempt"], kw["delay"]) for name, kw in heard] == [
        ("snoozed", handle.id, 1, 0.25)
    ]
    line = next(r for r in caplog.records if "outcome=snoozed" in r.getMessage())
    assert line.levelno == logging.INFO and line.exc_info is None
    assert f"job_id={handle.id} queue=default attempt=1 outcome=snoozed" in line.getMessage()
    assert "snooze=0.25" in line.getMessage() and "error=" not in line.getMessage()
    tally = stats.Tally()
    tally.add("snoozed", 3)
    assert (tally.snoozed, tally.failures) == (3, 0)


def test_a_snooze_past_its_cap_is_dead_lettered_as_snoozed_and_alerts_once(redis_db, heard):
    handle = jobs.snoozes_forever.enqueue("b")  # max_snoozes=3
    drain(lambda: DeadLetter.objects.exists())
    assert done("run:b") == 4  # three snoozes, then the fourth asked once more: dead
    dead = DeadLetter.objects.get()
    assert (dead.job_id, dead.reason, dead.attempts) == (handle.id, "snoozed", 1)
    assert dead.exception == "django_jobs.exceptions.SnoozedTooOften"
    assert "snoozed 3 times" in dead.message and "max_snoozes" in dead.message
    assert "raise Snooze(seconds)" in dead.traceback  # where the job snoozed
    assert [name for name, _ in heard] == ["snoozed", "snoozed", "snoozed", "failed"]
    assert [handle.id] == ALERTED
    state = get_job(handle.id)
    assert (state.status, state.snoozes) == (Status.FAILED, 3)


def test_the_setting_caps_the_snoozes_of_a_job_without_its_own_cap(redis_db, settings):
    settings.JOBS = {**settings.JOBS, "MAX_SNOOZES": 2}
    handle = jobs.snoozer.enqueue("c", times=5, seconds=0.05)
    drain(lambda: DeadLetter.objects.exists())
    assert runs("c") == ["1", "1", "1"] and done("c") == 0
    assert DeadLetter.objects.get().reason == DeadLetter.Reason.SNOOZED
    assert registry.get("tests.snoozes_forever").snooze_cap == 3  # its own max_snoozes wins
    assert get_job(handle.id).snoozes == 2


@pytest.mark.parametrize("kind", sorted(jobs.BAD_SNOOZES))
def test_a_bad_snooze_fails_the_attempt_with_a_clear_error(redis_db, kind, heard):
    handle = jobs.snoozes_badly.enqueue("bad", kind)
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert state.status is Status.SCHEDULED and state.attempts == 1 and state.snoozes == 0
    assert state.errors[0].exception == "builtins.ValueError"
    assert "Snooze() takes a number of seconds or a timedelta from 0 to 2.592e+06" in state.errors[0].message
    assert [name for name, _ in heard] == ["failed", "retrying"]


def test_snooze_refuses_bad_values_where_it_is_built():
    for value in (-0.1, float("nan"), float("inf"), 31 * 86400, "5", None, True, dt.timedelta(days=-1)):
        with pytest.raises(ValueError, match=r"Snooze\(\) takes"):
            Snooze(value)  # type: ignore[arg-type]
    assert Snooze(0).seconds == 0.0 and Snooze(dt.timedelta(days=30)).seconds == 30 * 86400
    assert issubclass(SnoozedTooOften, Exception) and str(Snooze(2.5)) == "Snoozed for 2.5 s."
    assert pickle.loads(pickle.dumps(Snooze(4))).seconds == 4.0  # as a parallel test runner sends it


# --- fenced, and a cancel wins -------------------------------------------------------------------------


def test_a_snooze_from_an_attempt_that_lost_its_lease_changes_nothing(redis_db, caplog):
    handle = jobs.snoozer.enqueue("f", times=1)
    store = Store.of(redis_db)
    claimed = claim(store)
    redis_db.zrem(LEASES, claimed.token)  # the reaper took the lease: another attempt owns the job now
    before = redis_db.hgetall(f"rq:job:{handle.id}")
    assert store.snooze(claimed.token, claimed.queue, 1.0, 60) is Settled.FENCED
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        ended = settle_snooze(store, claimed, Snooze(1), jobs.snoozer, 0.01)
    assert "its snooze changed nothing" in caplog.text and ended.retry_in is None
    assert redis_db.hgetall(f"rq:job:{handle.id}") == before  # attempt still counted, not scheduled
    assert redis_db.zscore("rq:scheduled:default", handle.id) is None


def test_a_snoozed_job_waiting_to_run_again_is_cancelled_and_never_runs(redis_db):
    handle = jobs.snoozer.enqueue("w", times=1, seconds=0.2)
    assert run_jobs() == 1
    assert cancel(handle.id) is CancelResult.CANCELLED
    time.sleep(0.3)
    assert run_jobs() == 0
    assert get_job(handle.id).status is Status.CANCELED and done("w") == 0


def test_a_job_asked_to_stop_that_snoozes_is_cancelled_not_snoozed(redis_db, heard):
    handle = jobs.cancels_itself.enqueue("k", then="snooze")
    assert run_jobs() == 1
    assert get_job(handle.id).status is Status.CANCELED
    assert redis_db.zscore("rq:scheduled:default", handle.id) is None
    assert heard == []  # neither a snooze nor a failure: job_cancelled


# --- bookkeeping of periodic runs and chains -------------------------------------------------------------


def test_a_periodic_run_that_snoozes_finishes_only_when_its_job_succeeds(redis_db):
    now = dt.datetime.now(dt.UTC)
    run = CronRun.objects.create(
        name="tests.snoozer", scheduled_for=now, deadline=now + dt.timedelta(hours=1)
    )
    enqueue_calls(
        jobs.snoozer, [(("cron",), {"times": 1, "seconds": 0.05})], options=Options(cron_run=run.pk)
    )
    assert run_jobs() == 1
    run.refresh_from_db()
    assert run.finished_at is None  # snoozed: the period's job has not run yet
    drain(lambda: done("cron") == 1)
    run.refresh_from_db()
    assert run.finished_at is not None


@pytest.mark.parametrize("returned", [False, True], ids=["raised", "returned"])
def test_a_chain_page_that_snoozes_runs_again_from_its_checkpoint(redis_db, returned):
    Item.objects.bulk_create(Item(name=f"i{i}") for i in range(5))
    started = jobs.snoozy_pages.start(page_size=2, returned=returned)
    drain(lambda: Chain.objects.get(pk=started.pk).status == Chain.Status.DONE)
    finished = Chain.objects.get(pk=started.pk)
    assert (finished.pages_done, finished.items_done, finished.last_error) == (3, 5, "")
    items = [key for key in SideEffect.objects.values_list("key", flat=True) if key.startswith("item:")]
    assert sorted(items) == sorted(set(items)) and len(items) == 5  # a snoozed page's writes rolled back
    assert not DeadLetter.objects.exists()


# --- test modes -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("returned", [False, True], ids=["raised", "returned"])
def test_immediate_mode_raises_the_snooze_to_the_caller(returned):
    with immediate_jobs(), pytest.raises(Snooze) as raised:
        jobs.snoozer.enqueue("i", times=1, seconds=7, returned=returned)
    assert raised.value.seconds == 7
    assert runs("i") == ["1"]  # ran once, inline, as attempt 1 (as a worker runs it); nothing runs it again


def test_captured_jobs_run_raises_a_returned_snooze():
    with capture_jobs() as captured:
        jobs.snoozer.enqueue("cap", times=1, seconds=3, returned=True)
    with pytest.raises(Snooze) as raised:
        captured.run()
    assert raised.value.seconds == 3
