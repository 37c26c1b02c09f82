"""A fresh project's worker: what ``runjobs`` prints by default, and when ``--burst`` is done."""

from __future__ import annotations

import re
import subprocess

import pytest

from django_jobs.store import scheduled_key
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FRESH = {"JOBS_TEST_LOGGING": "unset"}  # no LOGGING setting, as in a new project


def keys():
    return sorted(SideEffect.objects.values_list("key", flat=True))


def finished(worker, timeout=60):
    try:
        return worker.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"runjobs --burst still running after {timeout} s:\n{worker.output()}") from None


# --- a worker that talks -------------------------------------------------------------------------


def test_a_fresh_project_prints_what_it_serves_and_every_outcome(runjobs, redis_url):
    worker = runjobs("--concurrency", "2", extra_env=FRESH)
    jobs.record.enqueue("hello")
    wait_for(lambda: "outcome=success" in worker.output())
    output = worker.output()
    redis_where = re.sub(r"^redis://", "", redis_url)
    start = re.search(r"INFO \[(\d+)\] runjobs \(pid (\d+)\) serving (.+) on Redis (\S+) with 2 work", output)
    assert start, output
    assert start[1] == start[2] == str(worker.proc.pid)
    assert start[3] == "default, emails" and start[4] == redis_where
    success = r"INFO \[\d+\] job=tests\.record job_id=\w+ queue=default attempt=1 outcome=success"
    assert re.search(success, output), output
    assert worker.terminate() == 0


def test_verbosity_0_prints_only_warnings_and_errors(runjobs):
    worker = runjobs("-v", "0", extra_env=FRESH)
    jobs.record.enqueue("quiet")
    jobs.invalid.enqueue("loud")
    wait_for(lambda: "outcome=dead" in worker.output())
    assert SideEffect.objects.filter(key="quiet").exists()
    output = worker.output()
    assert "ERROR" in output and " INFO " not in output and "outcome=success" not in output, output
    assert worker.terminate() == 0


def test_a_projects_own_logging_is_left_alone(runjobs):
    worker = runjobs()  # the test settings send django_jobs to a console at WARNING
    jobs.record.enqueue("hello")
    jobs.invalid.enqueue("loud")
    wait_for(lambda: "outcome=dead" in worker.output())
    wait_for(lambda: SideEffect.objects.filter(key="hello").exists())
    output = worker.output()
    assert "outcome=success" not in output and output.count("outcome=dead") == 1, output
    assert worker.terminate() == 0


# --- burst that finishes -------------------------------------------------------------------------


def test_burst_stays_for_retries_and_delayed_jobs_due_soon(runjobs):
    jobs.fails_then_succeeds.enqueue("flaky", failures=1)
    jobs.record.enqueue_in(1.5, "delayed")
    worker = runjobs("--burst", "--concurrency", "2")
    assert finished(worker) == 0, worker.output()
    assert keys() == ["attempt:flaky", "attempt:flaky", "delayed", "flaky"]


def test_burst_leaves_jobs_due_after_the_wait_for_a_later_run(runjobs, redis_db):
    handle = jobs.record.enqueue_in(300, "tomorrow")
    jobs.record.enqueue("now")
    worker = runjobs("--burst", "--burst-wait", "1")
    assert finished(worker) == 0, worker.output()
    assert keys() == ["now"]
    assert redis_db.zscore(scheduled_key("default"), handle.id) is not None


@pytest.mark.parametrize("wait", ["-1", "nan", "inf"])
def test_a_burst_wait_that_is_not_a_finite_number_of_seconds_is_refused(runjobs, wait):
    worker = runjobs("--burst", "--burst-wait", wait)
    assert finished(worker) != 0
    assert "argument --burst-wait" in worker.output()
    assert "Traceback" not in worker.output()
