"""Claims in batches (``JOBS["CLAIM_BATCH"]``) under a real ``runjobs`` on a real Redis and database:
a backlog of short jobs is leased several at a time; when the work process dies under one job of a
batch (a kill, a timeout, a lease taken back), the jobs of the batch that had not started go back to
their queue without spending an attempt, and nothing is lost or run twice."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from django_jobs import pause, resume
from django_jobs.store import LEASES, LOST, Store, job_key
from django_jobs.store.audit import audit
from django_jobs.store.lifecycle import F, State, Status
from django_jobs.store.read import where
from tests.conftest import wait_for
from tests.integration.test_async_lanes_worker import work_processes
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True)]


def steps(key: str) -> list[int]:
    """The attempt numbers of the runs of ``step`` (or ``stall``) ``key`` that started, in order."""
    rows = SideEffect.objects.filter(key__startswith=f"step:{key}|").order_by("id")
    return [int(row.key.split("|")[1]) for row in rows]


FINISHED = Status.FINISHED.value.encode()


def audited(redis_db) -> None:
    found = audit(Store.of(redis_db))
    assert found.ok, "\n".join(str(problem) for problem in found.problems)


def test_a_backlog_of_short_jobs_is_leased_in_batches_and_every_job_runs_once(runjobs, redis_db):
    # jobs that write nothing: short however slow the disk is (a job of 20 ms or more is claimed alone)
    handles = [jobs.quick.enqueue(n) for n in range(300)]
    worker = runjobs("--burst", "--concurrency", "1")
    assert worker.proc.wait(60) == 0, worker.output()
    found = [redis_db.hmget(job_key(h.id), [F.STATUS, F.ATTEMPT, F.STARTED_AT]) for h in handles]
    assert all(status == FINISHED and attempt == b"1" for status, attempt, _ in found)  # one attempt each
    stamps = {started for _, _, started in found}
    assert len(stamps) < len(handles) / 2, len(stamps)  # a batch's jobs share their claim's stamp
    audited(redis_db)


@contextlib.contextmanager
def batched(runjobs, redis_db):
    """A runjobs whose one work process has the pace of short jobs; what the block enqueues waits
    behind a pause and is released at once, so one claim takes it as a batch."""
    worker = runjobs("--concurrency", "1")
    warm = [jobs.quick.enqueue(n).id for n in range(5)]  # no database write: the pace of short jobs
    wait_for(lambda: all(redis_db.hget(job_key(job_id), F.STATUS) == FINISHED for job_id in warm))
    pause(queue="default")
    time.sleep(1.5)  # the work process reads pauses once a second
    yield worker
    resume(queue="default")


def lined_up(runjobs, redis_db, stalled):
    """A runjobs whose one work process has the pace of short jobs, then a batch of ``stalled``'s job
    and short jobs behind it, lined up while the queue was paused and released at once. Returns the
    runjobs, once the batch holds short jobs leased, not started, while its first one stalls."""
    with batched(runjobs, redis_db) as worker:
        stalled()
        behind = {f"b{n}": jobs.step.enqueue(f"b{n}").id for n in range(5)}
    wait_for(lambda: steps("stall"))
    leased = [
        key for key, job_id in behind.items() if where(Store.of(redis_db), job_id).state is State.RUNNING
    ]
    assert leased and not any(steps(key) for key in leased), "no batch held jobs behind the stall"
    return worker


def test_a_batch_whose_process_is_killed_gives_its_unstarted_jobs_back_unspent(runjobs, redis_db):
    worker = lined_up(runjobs, redis_db, lambda: jobs.stall.enqueue("stall", 30))
    (process,) = work_processes(worker.proc.pid)
    os.kill(process, signal.SIGKILL)
    wait_for(lambda: all(steps(f"b{n}") for n in range(5)) and steps("stall") == [1, 2], timeout=30)
    assert all(steps(f"b{n}") == [1] for n in range(5))  # handed back: run once, as attempt 1
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_a_batch_whose_job_overruns_its_timeout_gives_the_others_back_unspent(runjobs, redis_db):
    worker = lined_up(runjobs, redis_db, lambda: jobs.stall_past_timeout.enqueue("stall"))
    wait_for(lambda: all(steps(f"b{n}") for n in range(5)) and steps("stall") == [1, 2], timeout=30)
    assert "overran its timeout; killing work process" in worker.output()
    assert all(steps(f"b{n}") == [1] for n in range(5))
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_the_jobs_a_batch_holds_keep_their_leases_while_a_job_before_them_runs_long(runjobs, redis_db):
    worker = lined_up(runjobs, redis_db, lambda: jobs.stall.enqueue("stall", 5))  # leases are 3 s here
    wait_for(lambda: all(steps(f"b{n}") for n in range(5)), timeout=30)
    assert steps("stall") == [1] and all(steps(f"b{n}") == [1] for n in range(5))  # none reaped as lost
    assert "outcome=lost" not in worker.output() and "taken back" not in worker.output()
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_a_result_is_kept_when_a_later_job_of_its_batch_kills_the_process(runjobs, redis_db):
    with batched(runjobs, redis_db) as worker:
        computed = jobs.compute.enqueue("kept")
        jobs.kill_always.enqueue("killer")  # takes its work process down on every attempt
    wait_for(lambda: SideEffect.objects.filter(key="attempt:killer").count() >= 2, timeout=30)
    assert redis_db.hget(job_key(computed.id), F.STATUS) == FINISHED
    assert redis_db.hget(job_key(computed.id), F.RESULT) is not None  # completed before the kill
    worker.kill_tree()


def test_a_batch_whose_running_job_loses_its_lease_gives_the_others_back_unspent(runjobs, redis_db):
    made = {}
    worker = lined_up(runjobs, redis_db, lambda: made.setdefault("stall", jobs.stall.enqueue("stall", 30)))
    prefix = made["stall"].id.encode()
    (token,) = [t for t in redis_db.zrange(LEASES, 0, -1) if t.startswith(prefix)]
    redis_db.zrem(LEASES, token)  # what another runjobs' reaper does after a long outage
    redis_db.zadd(LOST, {token: 0})
    wait_for(lambda: "was taken back; stopping its attempt" in worker.output(), timeout=15)
    wait_for(lambda: all(steps(f"b{n}") for n in range(5)) and steps("stall") == [1, 2], timeout=30)
    assert all(steps(f"b{n}") == [1] for n in range(5))  # handed back: run once, as attempt 1
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)
