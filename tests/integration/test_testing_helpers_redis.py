"""The test modes keep Redis untouched and publish each attempt's outcome as runjobs does; queue mode
still waits for a real commit; run_jobs() runs inside a test's wrapping transaction."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import TestCase

from django_jobs import PermanentError
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.signals import job_dead_lettered, job_failed, job_retrying, job_started, job_succeeded
from django_jobs.store import Status
from django_jobs.testing import Captured, CapturedJob, capture_jobs, immediate_jobs, run_jobs
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect
from tests.unit.test_testing_helpers import _signup, keys


def test_capture_records_jobs_with_decoded_args_and_queues_nothing(redis_db):
    user_id = uuid.UUID(int=42)
    with capture_jobs() as captured:
        handle = jobs.record.enqueue("a")
        jobs.echo_types.enqueue("b", user=user_id, amount=Decimal("1.10"), day=dt.date(2026, 1, 2))
    assert len(captured) == 2
    first, second = captured
    assert first == CapturedJob(id=handle.id, name="tests.record", queue="default", args=["a"], kwargs={})
    assert second.name == "tests.echo_types"
    assert second.kwargs == {"user": user_id, "amount": Decimal("1.10"), "day": dt.date(2026, 1, 2)}
    assert type(second.kwargs["user"]) is uuid.UUID
    assert str(second.kwargs["amount"]) == "1.10"
    assert redis_db.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_capture_inside_a_rolled_back_transaction_records_nothing(redis_db):
    with capture_jobs() as captured:
        with pytest.raises(RuntimeError), transaction.atomic():
            jobs.record.enqueue("never")
            raise RuntimeError("rollback")
        assert len(captured) == 0
    assert len(captured) == 0
    assert OutboxEntry.objects.count() == 0
    assert redis_db.dbsize() == 0


@pytest.mark.django_db
def test_immediate_runs_the_job_inline_with_decoded_args(redis_db):
    with immediate_jobs():
        jobs.record.enqueue("now")
        assert keys() == ["now"]
        jobs.echo_types.enqueue("t", amount=Decimal("1.10"), user=uuid.UUID(int=1))
    row = SideEffect.objects.exclude(key="now").get().key
    assert "('amount', 'Decimal', \"Decimal('1.10')\")" in row
    assert "('user', 'UUID', \"UUID('00000000-0000-0000-0000-000000000001')\")" in row
    assert redis_db.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_queue_mode_in_a_real_transaction_still_waits_for_the_commit(redis_db):
    with transaction.atomic():
        _signup("queued")
        assert OutboxEntry.objects.count() == 0 and redis_db.llen("rq:queue:default") == 0
    assert redis_db.llen("rq:queue:default") == 1


def test_jobs_captured_fixture(jobs_captured, redis_db):
    assert isinstance(jobs_captured, Captured)
    jobs.record.enqueue("fixture")
    jobs_captured.assert_enqueued(jobs.record, "fixture")
    assert len(jobs_captured) == 1
    assert redis_db.dbsize() == 0


@pytest.mark.django_db
def test_jobs_immediate_fixture(jobs_immediate, redis_db):
    jobs.record.enqueue("fixture")
    assert keys() == ["fixture"]
    assert redis_db.dbsize() == 0


# --- run_jobs() inside a test's wrapping transaction -------------------------------------------------


class RunJobsInsideTestCase(TestCase):
    """TestCase wraps each test in a transaction: run_jobs() must take it for the test's, not a leak."""

    def test_a_job_writing_rows_runs_once_and_the_test_goes_on(self):
        item = Item.objects.create(name="seen by the job")
        handle = jobs.record.enqueue(f"item:{item.pk}")
        assert run_jobs() == 1
        assert handle.state().status is Status.FINISHED  # no retry: its connection stayed open
        assert keys() == [f"item:{item.pk}"]  # the test's next query works, and sees the job's row
        assert Item.objects.count() == 1 and not DeadLetter.objects.exists()


@pytest.mark.django_db
def test_run_jobs_inside_pytest_djangos_db_fixture_keeps_the_tests_transaction(db):
    Item.objects.create(name="before")
    handle = jobs.record.enqueue("in-db-fixture")
    assert run_jobs() == 1
    assert handle.state().status is Status.FINISHED
    assert keys() == ["in-db-fixture"]
    assert list(Item.objects.values_list("name", flat=True)) == ["before"]


# --- the test modes publish each attempt's outcome, as runjobs does ------------------------------------


HEARD = {
    "started": job_started,
    "succeeded": job_succeeded,
    "failed": job_failed,
    "retrying": job_retrying,
    "dead_lettered": job_dead_lettered,
}


@pytest.fixture
def heard() -> Iterator[list[tuple[str, str]]]:
    """The job signals sent, in order, as (signal, job name)."""
    sent: list[tuple[str, str]] = []
    for label, signal in HEARD.items():
        signal.connect(lambda sender, label=label, **kw: sent.append((label, sender)), weak=False,
                       dispatch_uid=f"heard-{label}")  # fmt: skip
    yield sent
    for label, signal in HEARD.items():
        signal.disconnect(dispatch_uid=f"heard-{label}")


def _run(mode: str, job: object, key: str) -> BaseException | None:
    """Enqueue ``job(key)`` and run it once in ``mode``; what reached the test."""
    if mode == "run_jobs":
        job.enqueue(key)  # type: ignore[attr-defined]
        assert run_jobs() == 1
        return None
    try:
        if mode == "immediate":
            with immediate_jobs():
                job.enqueue(key)  # type: ignore[attr-defined]
        else:
            with capture_jobs() as captured:
                job.enqueue(key)  # type: ignore[attr-defined]
            captured.run()
    except Exception as exc:
        return exc
    return None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["run_jobs", "immediate", "capture"])
@pytest.mark.parametrize(
    ("job", "signals", "raised"),
    [
        (jobs.record, ["started", "succeeded"], None),
        (jobs.always_fails, ["started", "failed", "retrying"], ConnectionError),
        (jobs.permanent, ["started", "dead_lettered", "failed"], PermanentError),
    ],
    ids=["succeeds", "will-retry", "permanent"],
)
def test_the_test_modes_send_the_signals_runjobs_sends(heard, mode, job, signals, raised):
    got = _run(mode, job, "k")
    assert heard == [(signal, job.name) for signal in signals]
    if mode != "run_jobs":  # what the job raised reaches the test, after its outcome was published
        assert (type(got) if got else None) is raised
    dead = list(DeadLetter.objects.values_list("job_name", "reason"))
    assert dead == ([(job.name, DeadLetter.Reason.PERMANENT)] if raised is PermanentError else [])


class FastForward(TestCase):
    """``run_jobs(retries=True)``: a job that succeeds on its third attempt, tested in one call."""

    def test_a_job_that_succeeds_on_its_third_attempt_runs_all_three_without_waiting(self) -> None:
        handle = jobs.fails_then_succeeds.enqueue("third-time", 2)
        later = jobs.record.enqueue_in(dt.timedelta(hours=1), "an hour later")
        assert run_jobs() == 1  # without it, the retry waits out its backoff
        assert run_jobs(retries=True) == 3  # the two retries, and the delayed job
        assert SideEffect.objects.filter(key="third-time").count() == 1
        assert SideEffect.objects.filter(key="attempt:third-time").count() == 3
        assert handle.status == Status.FINISHED and later.status == Status.FINISHED

    def test_a_job_that_never_succeeds_ends_in_the_dead_letters_and_the_call_returns(self) -> None:
        handle = jobs.fails_then_succeeds.enqueue("never", 99)
        assert run_jobs(retries=True) == 3  # FAST allows 3 attempts
        assert DeadLetter.objects.filter(job_id=handle.id).exists()
