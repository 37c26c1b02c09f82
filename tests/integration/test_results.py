"""A job's status, result, errors, timestamps and workers, read by id from any process."""

from __future__ import annotations

import time

import pytest
from django.test import override_settings

from django_jobs import JobDoesNotExist, get_job
from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter
from django_jobs.store import Status
from django_jobs.testing import immediate_jobs, run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_finished_job_has_its_result_timestamps_and_worker():
    handle = jobs.compute.enqueue("r1")
    queued = handle.state()
    assert (queued.status, queued.result, queued.attempts) == (Status.QUEUED, None, 0)
    assert queued.args == ["r1"] and queued.kwargs == {}
    run_jobs()
    state = get_job(handle.id)
    assert state.status is Status.FINISHED and state.successful and state.finished
    assert state.result == {"key": "r1", "values": [1, 2.5, None, True]} == handle.result
    assert state.errors == () and state.attempts == 1
    assert state.worker_ids == ("django_jobs.testing",)
    assert state.enqueued_at <= state.started_at <= state.last_attempted_at <= state.finished_at


def test_a_job_that_keeps_no_result_costs_no_result_field():
    handle = jobs.record.enqueue("plain")
    run_jobs()
    assert handle.status is Status.FINISHED and handle.result is None
    assert not get_connection("default").hexists(f"rq:job:{handle.id}", "dj_result")


def test_each_failed_attempt_leaves_an_error_with_its_class_path_and_traceback():
    handle = jobs.compute.enqueue("r2", failures=2)
    wait_for(lambda: run_jobs() >= 0 and handle.status is Status.FINISHED)
    state = handle.state()
    assert state.attempts == 3 and state.result["key"] == "r2"
    assert [e.attempt for e in state.errors] == [1, 2]
    assert {e.exception for e in state.errors} == {"builtins.ConnectionError"}
    assert all("in compute" in e.traceback and "flaky upstream" in e.traceback for e in state.errors)
    assert state.started_at < state.last_attempted_at  # the first start stays; the last moves on
    assert state.enqueued_at <= state.started_at  # the enqueue, not the retry's return to the queue
    assert len(state.worker_ids) == 3


def test_a_return_value_that_is_not_json_fails_the_attempt_clearly_and_once():
    handle = jobs.not_json.enqueue("nj")
    run_jobs()
    state = handle.state()
    assert state.status is Status.FAILED and state.result is None
    assert state.errors[-1].exception == "django_jobs.exceptions.ResultError"
    assert "returned a set, which cannot be stored as JSON" in state.errors[-1].message
    entry = DeadLetter.objects.get(job_id=handle.id)
    assert entry.reason == DeadLetter.Reason.PERMANENT  # not retried: it would return a set again
    assert SideEffect.objects.filter(key="attempt:nj").count() == 1


def test_unknown_ids_and_expired_records_do_not_exist_and_a_bad_id_is_refused():
    with pytest.raises(JobDoesNotExist, match="No job abc exists"):
        get_job("abc")
    with pytest.raises(ValueError, match="is not a job id"):
        get_job("not an id")
    with override_settings(JOBS={**_jobs(), "FINISHED_TTL": 1}):
        handle = jobs.compute.enqueue("short")
        run_jobs()
        assert handle.result["key"] == "short"
        time.sleep(1.2)
        with pytest.raises(JobDoesNotExist):
            handle.state()


def _jobs():
    from django.conf import settings

    return dict(settings.JOBS)


def test_an_async_job_runs_on_an_event_loop_with_its_context_and_the_async_orm():
    handle = jobs.async_compute.enqueue("a1", delay=0.01)
    run_jobs()
    assert handle.result == {"key": "a1", "attempt": 1}
    assert SideEffect.objects.filter(key="a1").count() == 1


def test_an_async_job_that_overruns_is_cancelled_at_its_timeout():
    handle = jobs.async_overrun.enqueue("slow")
    started = time.monotonic()
    run_jobs()
    assert time.monotonic() - started < 5
    state = handle.state()
    assert state.status is Status.FAILED
    assert state.errors[-1].exception == "django_jobs.exceptions.JobTimeout"
    assert get_connection("default").lrange("tests:async_unwound", 0, -1) == [b"slow"]


def test_an_async_job_blocking_its_loop_is_stopped_by_the_alarm():
    handle = jobs.async_blocks.enqueue("blocks")
    started = time.monotonic()
    run_jobs()
    assert time.monotonic() - started < 5  # timeout 0.5 s + the alarm's margin, not 30 s
    assert handle.state().errors[-1].exception == "django_jobs.exceptions.JobTimeout"


def test_immediate_mode_runs_async_jobs_and_refuses_results_that_are_not_json():
    from django_jobs import ResultError

    with immediate_jobs():
        jobs.async_compute.enqueue("inline")
        with pytest.raises(ResultError):
            jobs.not_json.enqueue("inline")
    assert SideEffect.objects.filter(key="inline").count() == 1
