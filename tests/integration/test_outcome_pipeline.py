"""The outcome pipeline: each attempt's end is one event, seen by every subscriber in order, and a
subscriber that raises neither changes the outcome nor stops the subscribers after it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from django_jobs import Snooze
from django_jobs.core import outcomes
from django_jobs.core.execution import settle_failure, settle_snooze
from django_jobs.core.outcomes import AttemptEnded, Outcome
from django_jobs.exceptions import WorkerLost
from django_jobs.models import DeadLetter
from django_jobs.store import LEASES, Claimed, Store
from django_jobs.testing import run_jobs
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def seen() -> Iterator[list[AttemptEnded]]:
    """A subscriber that raises, then one that records, ahead of the pipeline the app connected."""
    events: list[AttemptEnded] = []
    connected = list(outcomes._subscribers)

    def raises(event: AttemptEnded) -> None:
        raise RuntimeError("a broken subscriber")

    outcomes.connect([("Raising", raises), ("Recording", events.append), *connected])
    try:
        yield events
    finally:
        outcomes.connect(connected)


def test_every_attempt_ends_in_one_event_and_the_pipeline_goes_past_a_broken_subscriber(seen, caplog):
    ok = jobs.record.enqueue("piped")
    dead = jobs.permanent.enqueue("piped-dead")
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        assert run_jobs() == 2
    broken = [r for r in caplog.records if r.getMessage().startswith("Raising for job")]
    assert [r.getMessage() for r in broken] == [
        f"Raising for job tests.record {ok.id} failed; the job's outcome stands.",
        f"Raising for job tests.permanent {dead.id} failed; the job's outcome stands.",
    ]
    assert all(r.exc_info and r.exc_info[0] is RuntimeError for r in broken)
    assert [(e.job_id, e.outcome) for e in seen] == [(ok.id, Outcome.SUCCESS), (dead.id, Outcome.DEAD)]
    success, failure = seen
    assert success.name == "tests.record" and success.queue == "default" and success.attempt == 1
    assert success.duration is not None and success.exception is None and not success.bury
    assert failure.bury and failure.judgement is not None and failure.exception is not None
    # The subscribers after the broken one still ran: the dead letter is written.
    assert SideEffect.objects.filter(key="piped").count() == 1
    assert DeadLetter.objects.filter(job_id=dead.id).exists()


def test_dead_lettering_is_a_subscriber_the_app_connects():
    whats = [what for what, _ in outcomes._subscribers]
    assert whats[:2] == ["Dead-lettering", "Marking a periodic run finished"]
    dead = jobs.permanent.enqueue("unsubscribed")
    connected = list(outcomes._subscribers)
    outcomes.connect([s for s in connected if s[0] != "Dead-lettering"])
    try:
        run_jobs()
    finally:
        outcomes.connect(connected)
    assert not DeadLetter.objects.filter(job_id=dead.id).exists()  # waits in "dying" for the supervisor


def test_an_end_the_store_fenced_off_reaches_no_subscriber(seen, redis_db):
    """An attempt settled twice (by a host cut off from Redis once its link returns, after the reaper
    that took its lease back; or by two reapers at once) is published once: the second settling is
    fenced off by the lease token, so the attempt is counted, signalled and logged once."""
    handle = jobs.record.enqueue("settled twice")
    store = Store(redis_db)
    claimed = claim(store)
    lost = WorkerLost("its work process died")
    outcomes.publish(settle_failure(store, claimed, lost))
    outcomes.publish(settle_failure(store, claimed, lost))
    assert [(e.job_id, e.outcome) for e in seen] == [(handle.id, Outcome.LOST)]


def test_a_snooze_the_store_fenced_off_reaches_no_subscriber(seen, redis_db):
    """A snooze from an attempt whose lease was taken back changes nothing, and is counted nowhere:
    whoever took the lease settled and counted the attempt."""
    jobs.snoozer.enqueue("fenced", times=1)
    store = Store(redis_db)
    claimed = claim(store)
    redis_db.zrem(LEASES, claimed.token)  # the reaper took the lease
    outcomes.publish(settle_snooze(store, claimed, Snooze(1), jobs.snoozer, 0.01))
    assert seen == []


def claim(store: Store) -> Claimed:
    claimed = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=10, nonce="n", finished_ttl=60
    ).claimed
    assert claimed is not None
    return claimed
