"""Pausing under two real ``runjobs``: neither takes a paused queue's jobs nor runs a paused job type's
(those are set aside in order, without an attempt), one started during the pause knows of it at once,
and both take the work up again when it is resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_jobs import get_job, pause, resume
from tests.conftest import Runjobs, wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

LOUD = {"JOBS_TEST_LOG": "INFO"}  # the work processes log each pause and resume they see


def ran(*keys: str) -> int:
    return SideEffect.objects.filter(key__in=keys).count()


def parent(worker_name: str) -> int:
    """The runjobs (supervisor) a work process named ``<host>.<pid>`` belongs to."""
    status = Path(f"/proc/{worker_name.rpartition('.')[2]}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def sees(worker: Runjobs, *lines: str) -> bool:
    return all(line in worker.output() for line in lines)


def test_two_runjobs_leave_paused_work_alone_and_both_take_it_up_on_resume(runjobs, redis_db):
    first = runjobs(extra_env=LOUD)
    pause(queue="emails", reason="mail provider down")
    pause(job=jobs.slow, reason="bad deploy")
    second = runjobs(extra_env=LOUD)  # it was not running when the pauses began
    for worker in (first, second):
        wait_for(lambda w=worker: sees(w, "Queue emails is paused", "Job tests.slow is paused"))

    held = [jobs.slow.enqueue(f"held-{n}", 0.4) for n in range(6)]
    mails = [jobs.greet.options(queue="emails").enqueue(f"mail-{n}") for n in range(3)]
    jobs.record.enqueue("behind")  # queued after the held jobs: once it ran, they were all popped
    wait_for(lambda: ran("behind") == 1)
    assert ran(*(f"attempt:held-{n}" for n in range(6)), *(f"hello:mail-{n}" for n in range(3))) == 0
    parked = [job_id.decode() for job_id in redis_db.lrange("djjobs:paused:default:tests.slow", 0, -1)]
    assert parked == [handle.id for handle in held]  # set aside in their order
    assert redis_db.llen("rq:queue:emails") == 3  # the paused queue keeps its jobs where they are
    assert {(state.attempts, state.paused) for state in map(get_job, parked + [m.id for m in mails])} == {
        (0, True)
    }

    assert resume(job=jobs.slow).released == 6
    resume(queue="emails")
    wait_for(lambda: ran(*(f"held-{n}" for n in range(6)), *(f"hello:mail-{n}" for n in range(3))) == 9)
    assert ran(*(f"attempt:held-{n}" for n in range(6))) == 6  # each ran once
    states = [get_job(handle.id) for handle in held]
    assert {state.attempts for state in states} == {1}
    runners = {parent(state.worker_ids[0]) for state in states}
    assert runners == {first.proc.pid, second.proc.pid}, (first.output(), second.output())
    for worker in (first, second):
        assert sees(worker, "Queue emails is resumed", "Job tests.slow is resumed")
        assert worker.proc.poll() is None, worker.output()
