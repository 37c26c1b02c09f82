"""``manage.py runjobs`` as a real subprocess, against real Redis and the test database."""

from __future__ import annotations

import datetime as dt
import re
import signal
import socket
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction
from rq import Queue
from rq.serializers import JSONSerializer

from django_jobs.models import DeadLetter, OutboxEntry
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def keys():
    return sorted(SideEffect.objects.values_list("key", flat=True))


def attempts(key):
    return SideEffect.objects.filter(key=f"attempt:{key}").count()


def test_jobs_from_rolled_back_transactions_and_savepoints_never_run(runjobs):
    worker = runjobs("--concurrency", "2")
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.record.enqueue("rolled-back")
        raise RuntimeError
    with transaction.atomic():
        jobs.record.enqueue("committed")
        try:
            with transaction.atomic():
                jobs.record.enqueue("savepoint-rolled-back")
                raise RuntimeError
        except RuntimeError:
            pass
    jobs.record.enqueue("sentinel")
    wait_for(lambda: SideEffect.objects.filter(key="sentinel").exists())
    wait_for(lambda: SideEffect.objects.filter(key="committed").exists())
    assert keys() == ["committed", "sentinel"]
    assert worker.terminate() == 0, worker.output()


def test_a_job_naming_an_unregistered_function_is_refused_and_the_worker_goes_on(runjobs, redis_db, tmp_path):
    marker = tmp_path / "pwned"
    evil = Queue("default", connection=redis_db, serializer=JSONSerializer).enqueue(
        "os.system", f"touch {marker}"
    )
    worker = runjobs()
    jobs.record.enqueue("healthy")
    wait_for(lambda: SideEffect.objects.filter(key="healthy").exists())
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=evil.id).first())
    assert entry.reason == DeadLetter.Reason.UNREGISTERED
    assert not marker.exists()
    assert worker.proc.poll() is None


def test_a_failing_job_is_retried_with_jittered_delays_then_dead_lettered(runjobs):
    runjobs()
    handle = jobs.always_fails.enqueue("x")
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=handle.id).first())
    assert entry.attempts == 3 and attempts("x") == 3
    assert entry.reason == DeadLetter.Reason.EXHAUSTED
    times = [a.created_at for a in SideEffect.objects.filter(key="attempt:x").order_by("created_at")]
    assert times[0] < times[1] < times[2]


def test_a_permanent_failure_is_dead_lettered_on_its_first_attempt(runjobs):
    runjobs()
    handle = jobs.invalid.enqueue("bad")
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=handle.id).first())
    assert entry.attempts == 1 and attempts("bad") == 1
    assert entry.exception == "tests.testapp.jobs.Invalid"


def test_the_same_payload_run_twice_gives_one_side_effect(runjobs):
    runjobs("--concurrency", "2")
    jobs.record_once.enqueue_many([("dup",), ("dup",), ("dup",)])
    jobs.record.enqueue("sentinel")
    wait_for(lambda: SideEffect.objects.filter(key="sentinel").exists())
    wait_for(lambda: SideEffect.objects.filter(key="dup").exists())
    assert SideEffect.objects.filter(key="dup").count() == 1


def test_a_work_process_killed_mid_job_is_retried_and_completes(runjobs, tmp_path):
    worker = runjobs()
    handle = jobs.kill_once.enqueue("k", str(tmp_path / "killed"))
    wait_for(lambda: SideEffect.objects.filter(key="k").exists())
    assert attempts("k") == 2
    assert (tmp_path / "killed").exists()
    assert not DeadLetter.objects.filter(job_id=handle.id).exists()
    assert worker.proc.poll() is None


def test_a_job_past_its_timeout_is_retried_then_dead_lettered_and_the_worker_serves_the_next(runjobs):
    worker = runjobs()
    handle = jobs.sleepy.enqueue("slow", 5)
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=handle.id).first())
    assert entry.exception == "django_jobs.exceptions.JobTimeout"
    assert attempts("slow") == 2 and not SideEffect.objects.filter(key="slow").exists()
    jobs.record.enqueue("next")
    wait_for(lambda: SideEffect.objects.filter(key="next").exists())
    assert worker.proc.poll() is None


def test_a_job_that_ignores_the_soft_timeout_is_killed_by_the_supervisor(runjobs):
    worker = runjobs()
    handle = jobs.stubborn.enqueue("stuck")
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=handle.id).first(), timeout=30)
    assert entry.exception == "django_jobs.exceptions.JobTimeout"
    assert attempts("stuck") == 2
    # each killed attempt's line says how long it ran: past its 1 s timeout, not 0
    lines = rf"job_id={handle.id} .* duration=([\d.]+)"
    killed = wait_for(lambda: len(found := re.findall(lines, worker.output())) == 2 and found)
    assert all(1 <= float(ran) < 15 for ran in killed), worker.output()
    jobs.record.enqueue("next")
    wait_for(lambda: SideEffect.objects.filter(key="next").exists())
    assert worker.proc.poll() is None


def test_sigterm_finishes_the_running_job_and_exits_zero(runjobs):
    worker = runjobs()
    jobs.sleepy.enqueue("graceful", 0.5)
    wait_for(lambda: SideEffect.objects.filter(key="attempt:graceful").exists())
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(20) == 0, worker.output()
    assert SideEffect.objects.filter(key="graceful").exists(), worker.output()


def test_burst_drains_the_queue_and_exits(runjobs):
    jobs.record.enqueue_many([(f"b{i}",) for i in range(30)])
    worker = runjobs("--burst", "--concurrency", "2")
    assert worker.proc.wait(60) == 0, worker.output()
    assert SideEffect.objects.count() == 30
    assert not OutboxEntry.objects.exists()  # at "ledger", the rows of the jobs it ran went before it did


def test_an_unknown_queue_is_a_clear_fatal_error(runjobs):
    worker = runjobs("nope")
    assert worker.proc.wait(60) != 0
    assert "nope" in worker.output()


def test_max_jobs_recycles_each_work_process_after_that_many_jobs_and_keeps_serving(runjobs):
    jobs.record.enqueue_many([(f"m{i}",) for i in range(6)])
    worker = runjobs("--max-jobs", "2")
    wait_for(lambda: SideEffect.objects.count() == 6)  # three work processes, one after the other
    assert worker.proc.poll() is None
    jobs.record.enqueue("later")
    wait_for(lambda: SideEffect.objects.filter(key="later").exists())
    assert worker.terminate() == 0, worker.output()


def test_max_jobs_with_burst_recycles_until_the_queue_is_drained_then_exits(runjobs):
    jobs.record.enqueue_many([(f"m{i}",) for i in range(7)])
    worker = runjobs("--max-jobs", "2", "--burst", "--burst-wait", "0")
    assert worker.proc.wait(60) == 0, worker.output()
    assert SideEffect.objects.count() == 7


def _ready(worker) -> bool:
    return "serving" in worker.output()


def test_the_first_job_after_start_up_starts_as_fast_as_the_next_ones(runjobs):
    """From the job's enqueue (stamped in its record) to its first write: the first job a fresh
    runjobs serves is not kept waiting by the supervisor's first maintenance pass, nor pays its work
    process's first connections, and a missed wake-up would cost it a second."""
    jobs.record.enqueue_in(3600, "warm-up")  # the client's own first enqueue is not the worker's cost
    worker = runjobs("default", extra_env={"JOBS_TEST_LOG": "INFO"})
    wait_for(lambda: _ready(worker))
    waits = []
    for key in ("first", "second"):
        handle = jobs.record.enqueue(key)
        row = wait_for(lambda key=key: SideEffect.objects.filter(key=key).first())
        waits.append((row.created_at - handle.state().enqueued_at).total_seconds())  # to its first write
    assert waits[0] < 0.3, waits
    assert worker.proc.poll() is None


@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"), reason="a database session's start time"
)
def test_the_first_job_runs_on_a_database_session_its_work_process_opened_before_it_was_enqueued(runjobs):
    worker = runjobs("default", extra_env={"JOBS_TEST_LOG": "INFO"})
    wait_for(lambda: _ready(worker))
    time.sleep(0.5)  # the work process is up and idle
    handle = jobs.session_start.enqueue("first")
    row = wait_for(lambda: SideEffect.objects.filter(key__startswith="first:").first())
    session_began = dt.datetime.fromtimestamp(float(row.key.split(":")[1]), dt.UTC)
    assert session_began < handle.state().enqueued_at


def listening(port: int) -> set[str]:
    """The addresses a TCP port listens on, from the kernel's table (hex "0100007F" is 127.0.0.1)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            found.add(".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_the_metrics_port_listens_on_loopback_unless_told_otherwise(runjobs):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = runjobs("--metrics-port", str(port))
    wait_for(lambda: listening(port), timeout=30)
    assert listening(port) == {"127.0.0.1"}
    assert worker.terminate() == 0, worker.output()
