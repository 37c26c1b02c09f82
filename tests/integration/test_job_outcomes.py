"""Outcomes through the worker's own code path, in process: signal receivers are user code that
may raise anything, and whatever a job's hash holds besides its payload cannot fail a success."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter
from django_jobs.signals import job_failed, job_retrying, job_started, job_succeeded
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

SIGNALS = {"started": job_started, "succeeded": job_succeeded, "failed": job_failed, "retrying": job_retrying}


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def status(job_id: str) -> bytes | None:
    return get_connection("default").hget(f"rq:job:{job_id}", "status")


@pytest.fixture
def broken_receivers() -> Iterator[list[str]]:
    """Every job signal gets a receiver that raises, then one that notes it was called, then one
    that raises SystemExit."""
    heard: list[str] = []

    def fails(**kwargs: object) -> None:
        raise RuntimeError("receiver bug")

    def exits(**kwargs: object) -> None:
        raise SystemExit("a receiver called sys.exit()")

    for name, signal in SIGNALS.items():
        signal.connect(fails, weak=False, dispatch_uid=f"fails-{name}")
        signal.connect(lambda n=name, **kw: heard.append(n), weak=False, dispatch_uid=f"hears-{name}")
        signal.connect(exits, weak=False, dispatch_uid=f"exits-{name}")
    yield heard
    for name, signal in SIGNALS.items():
        for kind in ("fails", "exits", "hears"):
            signal.disconnect(dispatch_uid=f"{kind}-{name}")


def test_receivers_that_raise_change_no_outcome_and_later_receivers_still_hear(broken_receivers):
    ok = jobs.record.enqueue("fine")
    bad = jobs.always_fails.enqueue("x")
    wait_for(lambda: run_jobs() >= 0 and DeadLetter.objects.exists())  # retries wait out their backoff
    assert done("fine") == 1 and status(ok.id) == b"finished"
    entry = DeadLetter.objects.get(job_id=bad.id)
    assert (entry.exception, entry.attempts) == ("builtins.ConnectionError", 3)
    assert sorted(set(broken_receivers)) == ["failed", "retrying", "started", "succeeded"]
    assert broken_receivers.count("failed") == 3 and broken_receivers.count("succeeded") == 1


#: Fields of a job's hash that the worker reads besides its payload; Redis may hold anything there.
BOOKKEEPING = ["dj_cron", "dj_history", "enqueued_at", "description"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.dictionaries(st.sampled_from(BOOKKEEPING), st.binary(max_size=40), min_size=1))
def test_garbage_in_a_jobs_bookkeeping_fields_never_fails_or_reruns_it(garbage: dict[str, bytes]) -> None:
    key = uuid.uuid4().hex
    ok = jobs.record.enqueue(key)
    bad = jobs.invalid.enqueue(key)  # a permanent failure: dead-lettered on its first attempt
    for handle in (ok, bad):
        get_connection("default").hset(f"rq:job:{handle.id}", mapping=garbage)
    run_jobs()
    assert done(key) == 1 and status(ok.id) == b"finished"
    entry = DeadLetter.objects.get(job_id=bad.id)
    assert (entry.exception, entry.attempts, done(f"attempt:{key}")) == ("tests.testapp.jobs.Invalid", 1, 1)


def test_a_deeply_nested_history_is_dropped_not_fatal() -> None:
    bad = jobs.invalid.enqueue("deep")
    get_connection("default").hset(f"rq:job:{bad.id}", "dj_history", b"[" * 100_000 + b"]" * 100_000)
    run_jobs()
    entry = DeadLetter.objects.get(job_id=bad.id)
    assert [h["attempt"] for h in entry.history] == [1]


def test_an_attempt_settled_outside_the_work_process_sends_job_failed_and_job_retrying(redis_db):
    """A worker that died mid-job: the reaper decides the outcome, and receivers hear it as they
    hear a failure raised in the job (error trackers hook job_failed)."""
    from django_jobs.exceptions import WorkerLost
    from django_jobs.store import LEASES, Store
    from django_jobs.worker.maintenance import Maintenance

    heard: list[tuple[str, dict[str, object]]] = []
    for name in ("failed", "retrying"):
        SIGNALS[name].connect(
            lambda n=name, **kw: heard.append((n, kw)), weak=False, dispatch_uid=f"lost-{name}"
        )
    try:
        handle = jobs.record.enqueue("lost")
        _, claimed, _ = Store(redis_db).complete_and_claim(
            ["default"], finished=None, worker_name="dead", lease_seconds=60, nonce="n1", finished_ttl=60
        )
        assert claimed is not None and claimed.id == handle.id
        redis_db.zadd(LEASES, {claimed.token: 1})  # its lease expired long ago
        loop = Maintenance(Store(redis_db), ["default"], 0.1)
        for _ in range(3):
            loop.reaper.run()
    finally:
        for name in ("failed", "retrying"):
            SIGNALS[name].disconnect(dispatch_uid=f"lost-{name}")
    assert [n for n, _ in heard] == ["failed", "retrying"]
    failed, retrying = heard[0][1], heard[1][1]
    assert failed["job_id"] == handle.id and failed["duration"] is None
    assert isinstance(failed["exception"], WorkerLost)
    assert retrying["delay"] == 0.0  # a lost worker's job goes straight back
    run_jobs()
    assert done("lost") == 1
