"""Whatever a job does is an outcome of that job, and no job can take ``runjobs`` down."""

from __future__ import annotations

import time

import pytest

from django_jobs.models import DeadLetter
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

#: What each kind of tests.raises raises, as the dead letter must name it.
CLASSES = {
    "SystemExit": "builtins.SystemExit",
    "KeyboardInterrupt": "builtins.KeyboardInterrupt",
    "GeneratorExit": "builtins.GeneratorExit",
    "Custom": "tests.testapp.jobs.Custom",
    "Unprintable": "tests.testapp.jobs.Unprintable",
    "Unspeakable": "tests.testapp.jobs.Unspeakable",
    "JunkNotes": "builtins.ValueError",
}


def done(key):
    return SideEffect.objects.filter(key=key).count()


def attempts(key):
    return SideEffect.objects.filter(key=f"attempt:{key}").count()


def dead_letters(n):
    """The dead letters by job id, once there are ``n`` of them."""
    entries = {entry.job_id: entry for entry in DeadLetter.objects.all()}
    return entries if len(entries) == n else None


def work_processes(redis_db):
    return redis_db.smembers("rq:workers")


def test_whatever_a_job_raises_is_judged_and_the_same_work_process_keeps_serving(runjobs, redis_db):
    worker = runjobs("--concurrency", "1")
    jobs.record.enqueue("first")
    wait_for(lambda: done("first") == 1)
    serving = wait_for(lambda: work_processes(redis_db))
    kinds = [kind for _ in range(3) for kind in CLASSES][:15]
    handles = []
    for i, kind in enumerate(kinds):
        handles.append((jobs.raises.enqueue(f"r{i}", kind), kind))
        jobs.record.enqueue(f"ok{i}")
    entries = wait_for(lambda: dead_letters(len(kinds)), timeout=60)
    for i, (handle, kind) in enumerate(handles):
        entry = entries[handle.id]
        assert (entry.exception, entry.reason, entry.attempts) == (CLASSES[kind], "exhausted", 2), kind
        assert attempts(f"r{i}") == 2  # retried per its policy, once: never rerun as a lost worker
        assert CLASSES[kind] in entry.traceback or kind in entry.traceback
    messages = {kind: entries[handle.id].message for handle, kind in handles}
    assert messages["SystemExit"] == "3"
    assert messages["Unprintable"] == "Unprintable('never shown')"  # str() raised: repr() stands in
    assert messages["Unspeakable"] == "<unprintable tests.testapp.jobs.Unspeakable object>"
    assert [h["exception"] for h in entries[handles[0][0].id].history] == ["builtins.SystemExit"] * 2
    wait_for(lambda: all(done(f"ok{i}") == 1 for i in range(len(kinds))))
    jobs.record.enqueue("after")
    wait_for(lambda: done("after") == 1)
    assert worker.proc.poll() is None, worker.output()
    assert work_processes(redis_db) == serving  # one work process served it all: no job ended it
    assert "exited with" not in worker.output()


def test_a_job_that_ends_its_process_every_time_is_dead_lettered_as_worker_lost_and_runjobs_stays_up(
    runjobs,
):
    worker = runjobs("--concurrency", "1")
    # 4 jobs x 3 attempts: 12 dead work processes, more than the 11 a minute that stop runjobs
    # when processes die on their own.
    handles = [jobs.exits.enqueue(f"x{i}", i % 2) for i in range(4)]  # exit codes 0 and 1 alike
    entries = [
        wait_for(lambda h=h: DeadLetter.objects.filter(job_id=h.id).first(), timeout=60) for h in handles
    ]
    for i, entry in enumerate(entries):
        assert (entry.reason, entry.attempts, attempts(f"x{i}")) == (DeadLetter.Reason.WORKER_LOST, 3, 3)
        assert entry.exception == "django_jobs.exceptions.WorkerLost"
    jobs.record.enqueue("healthy")
    wait_for(lambda: done("healthy") == 1)
    assert worker.proc.poll() is None, worker.output()


#: dj_cron values that name no periodic run: words, an id too big for any database, bytes that are
#: not UTF-8, a negative id, nothing at all.
GARBAGE = [b"not-a-run", b"99999999999999999999999", b"\xff\xfe", b"-1", b""]


def test_successful_jobs_with_a_garbage_periodic_run_field_run_exactly_once(runjobs, redis_db):
    handles = [jobs.record.enqueue(f"cron-{i}") for i in range(len(GARBAGE))]
    for handle, garbage in zip(handles, GARBAGE, strict=True):
        redis_db.hset(f"rq:job:{handle.id}", "dj_cron", garbage)
    worker = runjobs()
    for i, handle in enumerate(handles):
        wait_for(lambda h=handle: redis_db.hget(f"rq:job:{h.id}", "status") == b"finished")
        assert done(f"cron-{i}") == 1
        assert redis_db.hget(f"rq:job:{handle.id}", "dj_attempt") == b"1"
    assert not DeadLetter.objects.exists()
    assert worker.proc.poll() is None, worker.output()


def test_a_job_whose_process_dies_after_it_returned_is_complete_and_never_rerun(runjobs, redis_db):
    worker = runjobs(extra_env={"JOBS_TEST_DIE_AFTER_RETURN": "1"})
    handle = jobs.dies_after_return.enqueue("returned")
    wait_for(lambda: redis_db.hget(f"rq:job:{handle.id}", "status") == b"finished")
    assert done("returned") == 1
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_attempt") == b"1"
    wait_for(lambda: "exited with 1" in worker.output())  # the receiver did end the process
    jobs.record.enqueue("next")
    wait_for(lambda: done("next") == 1)
    assert done("returned") == 1 and not DeadLetter.objects.exists()
    assert worker.proc.poll() is None, worker.output()


def test_work_processes_that_die_on_start_up_still_stop_runjobs_with_an_error_but_no_fork_storm(runjobs):
    worker = runjobs("--concurrency", "1", extra_env={"JOBS_TEST_BROKEN_START": "1"})
    wait_for(lambda: "exited with" in worker.output(), timeout=30)
    first_death = time.monotonic()
    assert worker.proc.wait(60) == 1, worker.output()
    assert "died 11 times in a minute" in worker.output()
    # Respawns back off: the next ten deaths take seconds, not the milliseconds of a fork storm.
    assert time.monotonic() - first_death > 3
