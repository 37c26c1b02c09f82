"""``async def`` jobs side by side in one work process (``runjobs --async-jobs N``), under a real
``runjobs`` on a real Redis and database: they overlap; each lane keeps its own timeout, cancel and
lease; a hard kill for one lane hands its neighbours back without spending their attempts; a killed
process loses nothing. Sync jobs keep running one at a time in the main thread meanwhile."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from django_jobs import CancelResult, cancel
from django_jobs.models import DeadLetter
from django_jobs.store import Store
from django_jobs.store.audit import audit
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True)]


def ends(key: str) -> list[tuple[float, float]]:
    """(start, end) epoch seconds of each attempt of ``async_nap`` ``key`` that finished."""
    rows = SideEffect.objects.filter(key__startswith=f"{key}|").values_list("key", flat=True)
    return [(float(row.split("|")[1]), float(row.split("|")[2])) for row in rows]


def attempts(key: str) -> list[int]:
    """The attempt number each started run of ``async_nap`` ``key`` saw, in order."""
    rows = SideEffect.objects.filter(key__startswith=f"attempt:{key}|").order_by("id")
    return [int(row.key.split("|")[1]) for row in rows]


def status(redis_db, job_id: str) -> bytes | None:
    return redis_db.hget(f"rq:job:{job_id}", "status")


def work_processes(supervisor: int) -> list[int]:
    """The pids of the work processes (children) of the supervisor ``supervisor``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == supervisor:
                found.append(int(entry.name))
    return found


def audited(redis_db) -> None:
    found = audit(Store.of(redis_db))
    assert found.ok, "\n".join(str(problem) for problem in found.problems)


def test_async_jobs_overlap_in_one_work_process_while_a_sync_job_runs_beside_them(runjobs, redis_db):
    worker = runjobs("--async-jobs", "6", "--concurrency", "1")
    jobs.record.enqueue("warm")
    wait_for(lambda: SideEffect.objects.filter(key="warm").exists())
    keys = [f"nap{i}" for i in range(6)]
    for key in keys:
        jobs.async_nap.enqueue(key, 0.5)
    jobs.slow.enqueue("sync", 0.5)
    wait_for(lambda: all(ends(key) for key in keys) and SideEffect.objects.filter(key="sync").exists())
    spans = [ends(key)[0] for key in keys]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans  # all ran at once
    assert max(end for _, end in spans) - min(start for start, _ in spans) < 6 * 0.5 / 2, spans
    assert all(attempts(key) == [1] for key in keys)
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_one_async_job_past_its_timeout_fails_alone_and_its_neighbours_succeed(runjobs, redis_db):
    worker = runjobs("--async-jobs", "4")
    neighbours = [f"n{i}" for i in range(3)]
    for key in neighbours:
        jobs.async_nap.enqueue(key, 1.5)
    late = jobs.async_overrun.enqueue("late")  # timeout 0.5 s, one attempt: dead-lettered
    wait_for(lambda: DeadLetter.objects.filter(job_id=late.id).exists(), timeout=15)
    assert DeadLetter.objects.get(job_id=late.id).exception.endswith("JobTimeout")
    wait_for(lambda: all(ends(key) for key in neighbours))
    assert all(attempts(key) == [1] for key in neighbours)
    assert redis_db.lrange("tests:async_unwound", 0, -1) == [b"late"]  # cancelled on the loop, unwound
    assert "exited with" not in worker.output() and "killing work process" not in worker.output()
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_a_job_blocking_the_loop_kills_the_process_and_its_neighbours_run_again_unspent(runjobs, redis_db):
    worker = runjobs("--async-jobs", "4")
    neighbours = [f"b{i}" for i in range(3)]
    for key in neighbours:
        jobs.async_nap.enqueue(key, 4)
    wait_for(lambda: all(attempts(key) for key in neighbours))
    blocker = jobs.async_blocks.enqueue("blocker")  # time.sleep(30) inside async def, timeout 0.5 s
    wait_for(lambda: DeadLetter.objects.filter(job_id=blocker.id).exists(), timeout=20)
    assert "overran its timeout; killing work process" in worker.output()
    assert DeadLetter.objects.get(job_id=blocker.id).exception.endswith("JobTimeout")
    wait_for(lambda: all(ends(key) for key in neighbours), timeout=30)
    for key in neighbours:  # handed back: ran twice, each time as attempt 1, finished once
        assert attempts(key) == [1, 1], (key, attempts(key))
        assert len(ends(key)) == 1
    assert DeadLetter.objects.count() == 1
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_cancelling_one_running_async_job_stops_it_alone(runjobs, redis_db):
    worker = runjobs("--async-jobs", "4", extra_env={"JOBS_TEST_CANCEL_GRACE": "30"})
    victim = jobs.async_nap.enqueue("victim", 30)
    neighbours = [f"c{i}" for i in range(3)]
    for key in neighbours:
        jobs.async_nap.enqueue(key, 3)
    wait_for(lambda: attempts("victim") and all(attempts(key) for key in neighbours))
    asked = time.monotonic()
    assert cancel(victim.id) is CancelResult.REQUESTED
    wait_for(lambda: status(redis_db, victim.id) == b"canceled", timeout=10)
    assert time.monotonic() - asked < 5  # its task was cancelled: no kill after the 30 s grace
    wait_for(lambda: all(ends(key) for key in neighbours))
    assert all(attempts(key) == [1] for key in neighbours)
    assert attempts("victim") == [1] and not ends("victim") and not DeadLetter.objects.exists()
    assert "exited with" not in worker.output() and "did not stop within" not in worker.output()
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_a_long_async_job_in_a_lane_keeps_its_lease_through_heartbeats(runjobs, redis_db):
    worker = runjobs("--async-jobs", "3", extra_env={"JOBS_TEST_LEASE": "1"})
    for key in ("long", "l1", "l2"):
        jobs.async_nap.enqueue(key, 3.5)  # over three leases
    wait_for(lambda: all(ends(key) for key in ("long", "l1", "l2")), timeout=20)
    assert all(attempts(key) == [1] for key in ("long", "l1", "l2"))
    output = worker.output()
    assert "exited with" not in output and "No heartbeat" not in output and "taken back" not in output
    assert worker.terminate() == 0, output
    audited(redis_db)


def test_a_lane_whose_lease_is_taken_back_is_stopped_and_never_runs_twice_at_once(runjobs, redis_db):
    worker = runjobs("--async-jobs", "3", "--concurrency", "2")
    fenced = jobs.async_nap.enqueue("fenced", 5)
    jobs.async_nap.enqueue("beside", 5)
    wait_for(lambda: attempts("fenced") and attempts("beside"))
    (token,) = [t for t in redis_db.zrange("djjobs:leases", 0, -1) if t.startswith(fenced.id.encode())]
    redis_db.zrem("djjobs:leases", token)  # what another runjobs' reaper does after a long outage
    redis_db.zadd("djjobs:lost", {token: 0})
    wait_for(lambda: "was taken back; stopping its attempt" in worker.output(), timeout=15)
    wait_for(lambda: ends("fenced") and ends("beside"), timeout=40)
    first = float(
        SideEffect.objects.filter(key__startswith="attempt:fenced|").order_by("id")[0].key.split("|")[2]
    )
    time.sleep(max(0.0, first + 6 - time.time()))
    assert len(ends("fenced")) == 1  # the fenced attempt was stopped: it never finished beside the next
    assert len(ends("beside")) == 1
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_a_work_process_killed_while_lanes_run_loses_nothing(runjobs, redis_db):
    worker = runjobs("--async-jobs", "4")
    keys = [f"k{i}" for i in range(4)]
    for key in keys:
        jobs.async_nap.enqueue(key, 3)
    wait_for(lambda: all(attempts(key) for key in keys))
    (child,) = work_processes(worker.proc.pid)
    os.kill(child, signal.SIGKILL)
    wait_for(lambda: all(ends(key) for key in keys), timeout=30)
    for key in keys:  # each attempt settled as lost by the supervisor, retried at once, done once
        assert attempts(key) == [1, 2], (key, attempts(key))
        assert len(ends(key)) == 1
    assert "exited with -9 holding job" in worker.output()
    assert not DeadLetter.objects.exists()
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_an_async_django_task_runs_in_a_lane_beside_async_jobs(runjobs, redis_db):
    from tests.testapp import tasks

    worker = runjobs("--async-jobs", "3")
    jobs.async_nap.enqueue("beside", 1.5)
    wait_for(lambda: attempts("beside"))
    result = tasks.async_add.enqueue(4, 5)

    def finished() -> bool:
        result.refresh()
        return result.is_finished

    wait_for(finished, timeout=20)
    assert result.return_value == {"sum": 9, "attempt": 1}
    assert not ends("beside")  # it ran while the nap still ran in another lane
    wait_for(lambda: ends("beside"))
    assert worker.terminate() == 0, worker.output()
    audited(redis_db)


def test_sigterm_lets_running_lanes_finish_and_burst_waits_for_them(runjobs, redis_db):
    keys = [f"t{i}" for i in range(3)]
    for key in keys:
        jobs.async_nap.enqueue(key, 1.5)
    worker = runjobs("--async-jobs", "3")
    wait_for(lambda: all(attempts(key) for key in keys))
    assert worker.terminate() == 0, worker.output()
    assert all(len(ends(key)) == 1 and attempts(key) == [1] for key in keys)
    for key in ("u0", "u1"):
        jobs.async_nap.enqueue(key, 1.5)
    burst = runjobs("--async-jobs", "3", "--burst", "--burst-wait", "0")
    assert burst.proc.wait(30) == 0, burst.output()  # it exits only once no lane holds a job
    assert all(len(ends(key)) == 1 for key in ("u0", "u1"))
    audited(redis_db)
