"""Cancelling jobs under a real ``runjobs``: a waiting job never runs; a running one stops when its
code sees the request, or is killed ``CANCEL_GRACE`` seconds after its supervisor learns of it; the
attempt ends cancelled and is never retried. A completion that lands first wins."""

from __future__ import annotations

import time

import pytest

from django_jobs import CancelResult, cancel
from django_jobs.models import DeadLetter
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True, databases="__all__")]


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def status_is(redis_db, job_id: str, expected: bytes):
    return lambda: redis_db.hget(f"rq:job:{job_id}", "status") == expected


def started(key: str) -> None:
    wait_for(lambda: done(f"attempt:{key}") == 1)


def test_a_job_cancelled_while_queued_never_runs(runjobs, redis_db):
    doomed = jobs.record.enqueue("doomed")
    jobs.record.enqueue("kept")
    assert cancel(doomed.id) is CancelResult.CANCELLED
    worker = runjobs()
    wait_for(lambda: done("kept") == 1)
    jobs.record.enqueue("marker")  # queued behind everything this runjobs had to see
    wait_for(lambda: done("marker") == 1)
    assert done("doomed") == 0
    assert redis_db.hget(f"rq:job:{doomed.id}", "status") == b"canceled"
    assert worker.proc.poll() is None, worker.output()


def test_a_job_cancelled_while_scheduled_never_runs(runjobs, redis_db):
    worker = runjobs()
    later = jobs.record.enqueue_in(1.0, "later")
    assert later.cancel() is CancelResult.CANCELLED
    jobs.record.enqueue_in(1.5, "marker")  # due after the cancelled one would have been
    wait_for(lambda: done("marker") == 1)
    assert done("later") == 0
    assert redis_db.hget(f"rq:job:{later.id}", "status") == b"canceled"
    assert worker.proc.poll() is None, worker.output()


def test_a_running_job_that_polls_stops_as_asked_and_is_never_retried(runjobs, redis_db):
    worker = runjobs(extra_env={"JOBS_TEST_LOG": "INFO"})
    handle = jobs.polite.enqueue("polite")
    started("polite")
    assert cancel(handle.id) is CancelResult.REQUESTED
    wait_for(status_is(redis_db, handle.id, b"canceled"), timeout=10)
    assert (done("stopped:polite"), done("polite")) == (1, 0)
    wait_for(lambda: f"job_id={handle.id} queue=default attempt=1 outcome=cancelled" in worker.output())
    time.sleep(1.0)  # a retry would have started by now (backoff at most 0.2 s)
    assert done("attempt:polite") == 1 and not DeadLetter.objects.exists()
    assert "did not stop within" not in worker.output() and "exited with" not in worker.output()
    assert worker.proc.poll() is None, worker.output()


def test_a_running_job_that_ignores_the_request_is_killed_after_the_grace_never_retried(runjobs, redis_db):
    worker = runjobs(extra_env={"JOBS_TEST_CANCEL_GRACE": "2"})
    handle = jobs.deaf.enqueue("deaf")
    started("deaf")
    asked = time.monotonic()
    assert cancel(handle.id) is CancelResult.REQUESTED
    wait_for(status_is(redis_db, handle.id, b"canceled"), timeout=15, interval=0.02)
    took = time.monotonic() - asked
    # the grace (2 s) runs from the heartbeat that reports the request (every second: lease 3 s)
    assert 2.0 <= took < 5.0, took
    assert "did not stop within 2 s of its cancel request; killing work process" in worker.output()
    time.sleep(1.0)
    assert (done("attempt:deaf"), done("deaf")) == (1, 0)  # killed once, never retried
    assert not DeadLetter.objects.exists()
    jobs.record.enqueue("after")  # the work process it took down was replaced
    wait_for(lambda: done("after") == 1)
    assert worker.proc.poll() is None, worker.output()


def test_a_job_that_completes_within_the_grace_wins_the_race(runjobs, redis_db):
    worker = runjobs(extra_env={"JOBS_TEST_CANCEL_GRACE": "30"})
    handle = jobs.deaf.enqueue("quick", 1.5)  # ignores the request and finishes in 1.5 s
    started("quick")
    assert cancel(handle.id) is CancelResult.REQUESTED
    wait_for(status_is(redis_db, handle.id, b"finished"), timeout=10)
    assert done("quick") == 1
    assert cancel(handle.id) is CancelResult.ALREADY_ENDED
    time.sleep(0.5)
    assert redis_db.hget(f"rq:job:{handle.id}", "status") == b"finished"
    assert "did not stop within" not in worker.output()


def test_a_job_asked_to_stop_and_handed_back_at_shutdown_is_cancelled_not_requeued(runjobs, redis_db):
    worker = runjobs(extra_env={"JOBS_TEST_CANCEL_GRACE": "30", "JOBS_TEST_SHUTDOWN_GRACE": "1"})
    handle = jobs.deaf.enqueue("stopping")
    started("stopping")
    assert cancel(handle.id) is CancelResult.REQUESTED
    assert worker.terminate() == 0, worker.output()  # its shutdown grace ends before the cancel's
    assert redis_db.hget(f"rq:job:{handle.id}", "status") == b"canceled"
    assert redis_db.llen("rq:queue:default") == 0  # not handed back to its queue to run again
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_attempt") == b"1"
