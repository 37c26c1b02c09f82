"""Results and async jobs through a real ``runjobs``: the test process reads what the worker stored."""

from __future__ import annotations

import time

import pytest

from django_jobs import get_job
from django_jobs.store import Status
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def ended(handle):
    state = handle.state()
    return state if state.finished else None


def test_results_errors_and_async_jobs_read_back_from_another_process(runjobs, redis_db):
    runjobs("--concurrency", "2")
    plain = jobs.compute.enqueue("p", failures=1)
    async_ok = jobs.async_compute.enqueue("a", delay=0.05)
    overrun = jobs.async_overrun.enqueue("o")
    blocks = jobs.async_blocks.enqueue("b")
    started = time.monotonic()
    states = {h.id: wait_for(lambda h=h: ended(h), timeout=30) for h in (plain, async_ok, overrun, blocks)}
    assert time.monotonic() - started < 20  # nothing waited for its 30 s sleep
    first = states[plain.id]
    assert first.result["key"] == "p" and first.attempts == 2
    assert [e.exception for e in first.errors] == ["builtins.ConnectionError"]
    assert all(w.startswith(first.worker_ids[0].split(".")[0]) for w in first.worker_ids)
    assert get_job(async_ok.id).result == {"key": "a", "attempt": 1}
    for handle in (overrun, blocks):
        state = states[handle.id]
        assert state.status is Status.FAILED, handle
        assert state.errors[-1].exception == "django_jobs.exceptions.JobTimeout"
