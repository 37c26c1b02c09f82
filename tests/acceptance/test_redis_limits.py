"""Redis's limits, against real runjobs processes: a Redis that may evict jobs is refused, a job
whose hash vanished is dead-lettered and logged, and a frozen Redis never lets two attempts of one
job run at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from django_jobs.models import DeadLetter
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def evicting(server) -> redis.Redis:
    client = redis.Redis.from_url(server.url)
    client.config_set("maxmemory", "100mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    return client


def test_runjobs_refuses_a_redis_that_may_evict_jobs_unless_the_operator_allows_it(private_redis, runjobs):
    client = evicting(private_redis)
    jobs.record.enqueue("waits")
    refused = runjobs(extra_env={"JOBS_TEST_REDIS_URL": private_redis.url})
    assert refused.proc.wait(60) != 0
    line = next(line for line in refused.output().splitlines() if line.startswith("CommandError"))
    assert "maxmemory-policy allkeys-lru" in line and "noeviction" in line and "ALLOW_EVICTION" in line
    assert client.llen("rq:queue:default") == 1  # it took nothing
    allowed = runjobs(extra_env={"JOBS_TEST_REDIS_URL": private_redis.url, "JOBS_TEST_ALLOW_EVICTION": "1"})
    wait_for(lambda: SideEffect.objects.filter(key="waits").exists())
    assert "evicts keys when full" in allowed.output()
    assert allowed.terminate() == 0


def test_runjobs_runs_on_a_redis_that_forbids_config_and_says_the_policy_is_unknown(private_redis, runjobs):
    admin = redis.Redis.from_url(private_redis.url)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config")
    url = private_redis.url.replace("redis://", "redis://app:secret@")
    worker = runjobs(extra_env={"JOBS_TEST_REDIS_URL": url})
    jobs.record.enqueue("runs")
    wait_for(lambda: SideEffect.objects.filter(key="runs").exists())
    assert "Could not read the maxmemory-policy" in worker.output()
    assert worker.terminate() == 0


@pytest.mark.usefixtures("fast")  # at the default a vanished job is pushed again from its ledger row
def test_a_job_whose_hash_vanished_before_its_turn_is_dead_lettered_and_logged(redis_db, runjobs):
    gone = jobs.record.enqueue("gone")
    jobs.record.enqueue("kept")
    redis_db.delete(f"rq:job:{gone.id}")  # what eviction does
    worker = runjobs(extra_env={"JOBS_TEST_DURABILITY": "fast"})
    wait_for(lambda: SideEffect.objects.filter(key="kept").exists())
    entry = wait_for(lambda: DeadLetter.objects.filter(job_id=gone.id).first(), timeout=30)
    assert (entry.reason, entry.queue) == (DeadLetter.Reason.VANISHED, "default")
    wait_for(lambda: f"Job {gone.id} vanished from queue default" in worker.output())
    assert not redis_db.exists("djjobs:vanished")
    assert not SideEffect.objects.filter(key="gone").exists()


# --- a frozen Redis ------------------------------------------------------------------------------


def lifetimes(path: Path) -> dict[str, list[float | str]]:
    """Each attempt's marks (its pid's), in order: times, then "done" if it finished."""
    attempts: dict[str, list[float | str]] = {}
    for line in path.read_text().splitlines():
        pid, mark = line.split()
        attempts.setdefault(pid, []).append(mark if mark == "done" else float(mark))
    return attempts


def finished(path: Path) -> dict[str, list[float | str]] | None:
    attempts = lifetimes(path) if path.exists() else {}
    return attempts if any(marks[-1] == "done" for marks in attempts.values()) else None


def test_an_attempt_is_killed_before_its_lease_expires_while_redis_is_frozen(
    private_redis, runjobs, tmp_path
):
    lease = settings.JOBS["LEASE_SECONDS"]
    marks = tmp_path / "marks"
    worker = runjobs("--concurrency", "2", extra_env={"JOBS_TEST_REDIS_URL": private_redis.url})
    jobs.lifeline.enqueue(str(marks), 4 * lease)
    wait_for(lambda: marks.exists() and len(marks.read_text().splitlines()) > 5)
    frozen_at = time.time()
    private_redis.freeze()
    time.sleep(2 * lease)  # longer than the lease: after the thaw, a reaper takes the job back
    private_redis.thaw()
    attempts = wait_for(lambda: finished(marks), timeout=60)
    first, second = sorted(attempts.values(), key=lambda m: m[0])
    assert first[-1] != "done", "the first attempt ran to its end through the outage"
    # killed before its lease could expire: no later than a lease after the last heartbeat
    assert first[-1] < frozen_at + lease, (first[-1] - frozen_at, worker.output())
    assert second[0] > first[-1], "the second attempt started while the first still ran"
    assert "killed its attempt" in worker.output()


def test_a_healthy_attempt_longer_than_the_lease_is_never_killed(runjobs, tmp_path):
    lease = settings.JOBS["LEASE_SECONDS"]
    marks = tmp_path / "marks"
    worker = runjobs()
    jobs.lifeline.enqueue(str(marks), 3 * lease)
    attempts = wait_for(lambda: finished(marks), timeout=60)
    assert len(attempts) == 1, worker.output()  # one attempt, run to its end
    assert "killed its attempt" not in worker.output()
