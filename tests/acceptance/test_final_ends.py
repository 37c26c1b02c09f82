"""An end is final, whatever Redis loses: a cancelled job never runs, even after its Redis restarts
empty and the ledger sweep pushes again what Redis lost; and a job that started never expires, even
when it was handed back at shutdown.

These run ``manage.py runjobs`` as subprocesses; the ledger tests point it at a private Redis server
that they restart with no data, as a failover to an empty replica or a restart without its files does.
"""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from django_jobs import CancelResult, cancel, get_job
from django_jobs.models import OutboxEntry
from django_jobs.store import Status
from tests.chaos import RedisServer
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True, databases="__all__")]


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def restart_empty(server: RedisServer) -> None:
    """Stop the server and start it again without its data."""
    server.stop()
    for path in server.directory.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    server.start()


@pytest.fixture
def ledger(private_redis, settings) -> dict[str, str]:
    """Every queue at the "ledger" level, here and in runjobs (swept every second); runjobs' environment."""
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "ledger"}
    return {
        "JOBS_TEST_REDIS_URL": private_redis.url,
        "JOBS_TEST_DURABILITY": "ledger",
        "JOBS_TEST_LEDGER_SWEEP": "1",
    }


def test_a_cancelled_delayed_ledger_job_never_runs_after_redis_restarts_empty(private_redis, ledger, runjobs):
    worker = runjobs(extra_env={**ledger, "JOBS_TEST_LOG": "INFO"})
    cancelled = jobs.record.enqueue_in(2, "cancelled")
    witness = jobs.record.enqueue_in(2, "witness")  # lost with it, and pushed again by the sweep
    assert cancel(cancelled.id) is CancelResult.CANCELLED
    assert not OutboxEntry.objects.filter(pk=cancelled.id).exists()  # final in the database first
    restart_empty(private_redis)
    wait_for(lambda: done("witness") == 1, timeout=30)
    wait_for(lambda: get_job(witness.id).status is Status.FINISHED)
    time.sleep(1.5)  # a sweep more
    assert done("cancelled") == 0, worker.output()
    assert worker.proc.poll() is None, worker.output()


def test_a_cancelled_queued_ledger_job_never_runs_when_runjobs_starts_on_an_emptied_redis(
    private_redis, ledger, runjobs
):
    cancelled = jobs.record.enqueue("cancelled")  # no runjobs yet: it waits in its queue
    jobs.record.enqueue("witness")
    assert cancel(cancelled.id) is CancelResult.CANCELLED
    restart_empty(private_redis)
    time.sleep(1.1)  # the sweep takes rows older than a second
    worker = runjobs(extra_env={**ledger, "JOBS_TEST_LOG": "INFO"})
    wait_for(lambda: done("witness") == 1, timeout=30)  # the sweep pushed the rows it holds
    assert "were pushed again" in worker.output()
    time.sleep(1.5)
    assert done("cancelled") == 0, worker.output()
    assert worker.proc.poll() is None, worker.output()


def test_a_job_handed_back_at_shutdown_runs_after_its_expiry(runjobs):
    """It started before its expiry: a hand-back gives its attempt back, not its start."""
    first = runjobs(extra_env={"JOBS_TEST_LOG": "INFO"})
    wait_for(lambda: "work process(es)" in first.output(), timeout=30)  # it starts the job in time
    handle = jobs.slow.options(expires=4).enqueue("handed back", 3)
    wait_for(lambda: done("attempt:handed back") == 1)
    first.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    first.proc.send_signal(signal.SIGTERM)  # the second: hand running jobs back now
    assert first.proc.wait(30) == 0, first.output()
    assert done("handed back") == 0  # it did not finish
    assert get_job(handle.id).status is Status.QUEUED
    wait_for(lambda: time.time() > handle_expiry(handle.id) + 0.5, timeout=10)
    second = runjobs(extra_env={"JOBS_TEST_LOG": "INFO"})
    wait_for(lambda: done("handed back") == 1, timeout=30)
    wait_for(lambda: get_job(handle.id).status is Status.FINISHED)  # its completion lands just after
    assert "outcome=expired" not in second.output()
    assert get_job(handle.id).expired is False
    assert second.proc.poll() is None, second.output()


def handle_expiry(job_id: str) -> float:
    expires_at = get_job(job_id).expires_at
    assert expires_at is not None
    return expires_at.timestamp()
