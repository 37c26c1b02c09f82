"""Snooze and expiry under a real ``runjobs``: a job that snoozes runs again later without spending
an attempt, and one that snoozes past its cap is dead-lettered with reason "snoozed"; a job that
has not started by its expiry never runs, and the worker reports it."""

from __future__ import annotations

import time

import pytest

from django_jobs import get_job
from django_jobs.models import DeadLetter
from django_jobs.store import Status
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def test_snoozes_spend_no_attempt_and_the_cap_holds(runjobs):
    worker = runjobs("--concurrency", "2", extra_env={"JOBS_TEST_LOG": "INFO"})
    patient = jobs.snoozer.enqueue("patient", times=3, seconds=0.1)
    endless = jobs.snoozes_forever.enqueue("endless", seconds=0.1)  # max_snoozes=3
    wait_for(lambda: done("patient") == 1 and DeadLetter.objects.exists())
    runs = SideEffect.objects.filter(key__startswith="run:patient:").values_list("key", flat=True)
    assert sorted(runs) == ["run:patient:1"] * 4  # four runs, each of them attempt 1
    # its success is completed by the claim after its batch (CLAIM_BATCH), a moment after its code ran
    state = wait_for(lambda: (found := get_job(patient.id)).status is Status.FINISHED and found)
    assert (state.status, state.attempts, state.snoozes, state.errors) == (Status.FINISHED, 1, 3, ())
    dead = DeadLetter.objects.get()
    assert (dead.job_id, dead.reason, dead.attempts) == (endless.id, "snoozed", 1)
    assert done("run:endless") == 4  # three snoozes, and the one past the cap
    wait_for(lambda: f"job_id={endless.id} queue=default attempt=1 outcome=dead" in worker.output())
    log = worker.output()  # the line comes after the dead letter's row
    assert log.count(f"job_id={patient.id} queue=default attempt=1 outcome=snoozed") == 3
    assert "outcome=retry" not in log
    assert worker.proc.poll() is None, log


def test_a_job_not_started_by_its_expiry_never_runs(runjobs):
    late = jobs.record.options(expires=0.2).enqueue("late")  # no worker yet: nobody starts it in time
    time.sleep(0.4)
    worker = runjobs(extra_env={"JOBS_TEST_LOG": "INFO"})
    jobs.record.enqueue("marker")  # queued behind it
    wait_for(lambda: done("marker") == 1)
    on_time = jobs.reminder.enqueue("on time")  # @job(expires=2), taken at once by the idle worker
    wait_for(lambda: done("on time") == 1)
    assert done("late") == 0
    state = get_job(late.id)
    assert (state.status, state.expired, state.attempts) == (Status.CANCELED, True, 0)
    wait_for(lambda: get_job(on_time.id).status is Status.FINISHED)  # its completion lands just after
    wait_for(lambda: f"job_id={late.id} queue=default attempt=0 outcome=expired" in worker.output())
    assert not DeadLetter.objects.exists()
    assert worker.proc.poll() is None, worker.output()
