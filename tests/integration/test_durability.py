"""Durability levels against a real Redis and database: the ledger keeps a row until the job has
finished and pushes again a job Redis lost; "replicated" keeps a row while no replica confirms."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.checks import run_checks
from django.db import transaction
from django.utils import timezone

from django_jobs import CancelResult, cancel
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import Store, keys
from django_jobs.telemetry import metrics
from django_jobs.testing import run_jobs
from django_jobs.worker import ledger as ledger_module
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def ledger(settings):
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "ledger"}


def maintenance(redis_db) -> Maintenance:
    return Maintenance(Store(redis_db), ["default"], 0.1)


def age_rows(seconds: float = 5) -> None:
    """Past the sweep's one-second cutoff, which leaves fresh rows to their on-commit push."""
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(seconds=seconds))


def lose(redis_db, job_id: str) -> None:
    """What a failover to a replica that never had the push leaves: no hash, no queue entry."""
    redis_db.delete(keys.job_key(job_id))
    redis_db.lrem(keys.queue_key("default"), 0, job_id)


def test_a_ledger_row_is_written_outside_a_transaction_and_settled_once_its_job_finished(ledger, redis_db):
    handle = jobs.record.enqueue("a")
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [handle.id]
    work = maintenance(redis_db)
    work.ledger.saw([(handle.id, "default")])
    work.ledger.settle()
    assert OutboxEntry.objects.filter(pk=handle.id).exists()  # queued: not finished yet
    assert run_jobs() == 1
    work.ledger.saw([(handle.id, "default")])
    work.ledger.settle()
    assert not OutboxEntry.objects.exists()


def test_the_sweep_pushes_again_a_job_redis_lost_and_it_runs(ledger, redis_db):
    with transaction.atomic():
        lost = jobs.record.enqueue("lost")
    kept = jobs.record.enqueue("kept")
    lose(redis_db, lost.id)
    age_rows()
    before = metrics.LEDGER_REPUSHED.labels("default")._value.get()
    maintenance(redis_db).ledger.sweep()
    assert metrics.LEDGER_REPUSHED.labels("default")._value.get() == before + 1
    assert sorted(x.decode() for x in redis_db.lrange(keys.queue_key("default"), 0, -1)) == sorted(
        [lost.id, kept.id]
    )
    assert run_jobs() == 2
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["kept", "lost"]
    maintenance(redis_db).ledger.sweep()
    assert not OutboxEntry.objects.exists()  # both finished: their rows go


def test_the_sweep_walks_a_page_per_step_and_a_primary_change_starts_it_over(ledger, redis_db, monkeypatch):
    """A big backlog is swept a few pages per maintenance pass, never in one pass that would hold up
    the supervisor; the walk goes on where it stopped, and starts over when Redis lost data meanwhile."""
    monkeypatch.setattr(ledger_module, "BATCH", 2)
    monkeypatch.setattr(ledger_module, "STEP_SECONDS", 0.0)  # one page per step
    handles = [jobs.record.enqueue(f"k{n}") for n in range(5)]
    age_rows()
    redis_db.flushdb()  # every push lost
    work = maintenance(redis_db)
    work.ledger.watch_primary()

    def queued() -> set[str]:
        return {x.decode() for x in redis_db.lrange(keys.queue_key("default"), 0, -1)}

    work.ledger.sweep_if_due()
    first = queued()
    assert len(first) == 2 and work.ledger.walk is not None
    work.ledger.sweep_if_due()
    assert len(queued()) == 4 and first < queued()  # the walk went on: no page read twice
    redis_db.flushdb()  # Redis loses them again: the walk starts over
    work.ledger.watch_primary()
    assert work.ledger.walk is None and work.ledger.sweep_at == 0.0
    work.ledger.sweep_if_due()
    steps = 1
    while work.ledger.walk is not None and steps < 10:  # three pages here, one in each other outbox
        work.ledger.sweep_if_due()
        steps += 1
    assert queued() == {h.id for h in handles} and work.ledger.walk is None and steps > 3
    assert work.ledger.sweep_at > 0.0  # the walk is over: the next one waits its interval
    assert run_jobs() == 5


def test_the_sweep_settles_dead_lettered_jobs_and_keeps_scheduled_ones(ledger, redis_db):
    dead = jobs.permanent.enqueue("dead")
    later = jobs.record.enqueue_in(3600, "later")
    run_jobs()
    assert DeadLetter.objects.filter(job_id=dead.id).exists()
    age_rows()
    maintenance(redis_db).ledger.sweep()
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [later.id]


def test_a_unique_duplicate_leaves_the_ledger(ledger, redis_db):
    held = jobs.record.enqueue("u")
    # a second job with the same unique key is never pushed: nothing will run it, so no row waits for it
    duplicate = jobs.record.enqueue("dup")
    OutboxEntry.objects.filter(pk=duplicate.id).update(options={"unique_key": "k"})
    OutboxEntry.objects.filter(pk=held.id).update(options={"unique_key": "k"})
    redis_db.set(keys.unique_key("k"), held.id)
    lose(redis_db, duplicate.id)
    age_rows()
    maintenance(redis_db).ledger.sweep()
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [held.id]


@pytest.mark.parametrize("delay", [0, 3600], ids=["queued", "delayed"])
def test_a_cancelled_ledger_job_leaves_the_ledger_before_cancel_returns_and_no_sweep_brings_it_back(
    ledger, redis_db, delay
):
    """CANCELLED is final in the database: Redis losing everything afterwards pushes nothing again."""
    handle = jobs.record.enqueue_in(delay, "cancelled") if delay else jobs.record.enqueue("cancelled")
    witness = jobs.record.enqueue("witness")
    assert cancel(handle.id) is CancelResult.CANCELLED
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [witness.id]
    redis_db.flushdb()  # a restart without its data
    age_rows()
    maintenance(redis_db).ledger.sweep()
    assert redis_db.lrange(keys.queue_key("default"), 0, -1) == [witness.id.encode()]
    assert run_jobs() == 1 and list(SideEffect.objects.values_list("key", flat=True)) == ["witness"]


def test_a_cancelled_job_whose_row_the_relay_has_not_pruned_yet_is_not_pushed_again(redis_db):
    """At "fast" a transaction's row lives until the relay sees the job in Redis: cancelling deletes it."""
    with transaction.atomic():
        handle = jobs.record.enqueue("cancelled")
    assert OutboxEntry.objects.filter(pk=handle.id).exists()  # the relay prunes it about a second later
    assert cancel(handle.id) is CancelResult.CANCELLED
    assert not OutboxEntry.objects.exists()
    redis_db.flushdb()
    age_rows()
    maintenance(redis_db).relay.run()
    assert run_jobs() == 0 and not SideEffect.objects.exists()


def test_a_primary_change_is_recorded_once_and_brings_the_sweep_forward(ledger, redis_db):
    work = maintenance(redis_db)
    work.ledger.watch_primary()
    assert redis_db.hget(keys.PRIMARY, "changed_at") is None  # first sight is no change
    work.ledger.sweep_at = float("inf")
    redis_db.hset(keys.PRIMARY, "run_id", "the-old-primary")  # as a promoted replica would hold it
    work.ledger.watch_primary()
    assert work.ledger.sweep_at == 0.0
    assert redis_db.hget(keys.PRIMARY, "previous_run_id") == b"the-old-primary"
    changed = redis_db.hget(keys.PRIMARY, "changed_at")
    assert changed is not None
    work.ledger.watch_primary()
    assert redis_db.hget(keys.PRIMARY, "changed_at") == changed


def test_a_flushed_redis_is_swept_at_once_and_the_sweep_takes_fresh_rows_too(ledger, redis_db):
    """FLUSHDB keeps the server's run_id and replication id: the record of the primary going with the
    data is what tells of the loss. The jobs committed in the last second were lost too."""
    work = maintenance(redis_db)
    work.ledger.watch_primary()
    work.ledger.sweep_if_due()  # the sweep at start; the next one is LEDGER_SWEEP_INTERVAL away
    handle = jobs.record.enqueue("flushed")
    work.ledger.watch_primary()
    assert work.ledger.sweep_at > 0.0  # nothing happened: no sweep brought forward
    redis_db.flushdb()
    work.ledger.watch_primary()
    work.ledger.sweep_if_due()
    assert redis_db.lrange(keys.queue_key("default"), 0, -1) == [handle.id.encode()]
    assert run_jobs() == 1 and list(SideEffect.objects.values_list("key", flat=True)) == ["flushed"]


def test_a_replicated_push_no_replica_confirms_keeps_its_row_and_returns_in_time(settings, redis_db):
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "replicated", "REPLICA_TIMEOUT": 0.05}
    before = metrics.UNREPLICATED.labels("default")._value.get()
    started = timezone.now()
    handle = jobs.record.enqueue("r")
    assert (timezone.now() - started).total_seconds() < 1  # bounded by REPLICA_TIMEOUT, never a hang
    assert redis_db.lrange(keys.queue_key("default"), 0, -1) == [handle.id.encode()]  # it is queued
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [handle.id]
    assert metrics.UNREPLICATED.labels("default")._value.get() == before + 1
    age_rows()
    maintenance(redis_db).relay.run()  # re-pushes (a no-op here), still no replica: the row stays
    assert OutboxEntry.objects.filter(pk=handle.id).exists()
    assert redis_db.llen(keys.queue_key("default")) == 1
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "replicated", "REPLICAS": 0}
    maintenance(redis_db).relay.run()  # zero replicas asked: confirmed at once, the row goes
    assert not OutboxEntry.objects.exists()


def test_checks_report_an_unknown_level_or_queue_and_an_unbounded_replica_wait(settings):
    settings.JOBS = {
        **settings.JOBS,
        "DURABILITY": {"default": "durable", "nowhere": "ledger"},
        "DEFAULT_DURABILITY": "replicated",
        "REPLICA_TIMEOUT": 30,
    }
    found = {message.id for message in run_checks()}
    assert {"django_jobs.E015", "django_jobs.E016", "django_jobs.E017"} <= found
