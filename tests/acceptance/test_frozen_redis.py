"""A frozen Redis never lets two attempts of one job run at once.

runjobs kills an attempt whose lease it could not renew before that lease can expire as seen
from Redis, so by the time Redis thaws and a reaper takes the job back, the first attempt is dead.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


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
