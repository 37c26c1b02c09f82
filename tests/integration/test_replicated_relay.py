"""The relay's rule for rows of "replicated" queues no replica confirmed, against a real Redis (with no
replica) and database: a row is pushed once to each primary, never every pass, so a job that ran is
not created anew once its hash expired; a pass never waits on ``WAIT`` while too few replicas are
connected; a job that started leaves the outbox; a new primary gets the rows again."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from django_jobs.models import OutboxEntry
from django_jobs.store import Store, keys
from django_jobs.store.replication import read_primary
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

TIMEOUT = 0.5


@pytest.fixture(autouse=True)
def replicated(settings):
    settings.JOBS = {
        **settings.JOBS,
        "DEFAULT_DURABILITY": "replicated",
        "REPLICAS": 1,
        "REPLICA_TIMEOUT": TIMEOUT,
    }


def maintenance(redis_db) -> Maintenance:
    return Maintenance(Store(redis_db), ["default"], 0.1)


def age_rows(seconds: float = 5) -> None:
    """Past the relay's one-second cutoff, which leaves fresh rows to their on-commit push."""
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(seconds=seconds))


def queued(redis_db) -> list[str]:
    return [x.decode() for x in redis_db.lrange(keys.queue_key("default"), 0, -1)]


def test_a_job_that_ran_is_not_pushed_again_once_its_hash_expired(redis_db):
    handle = jobs.record.enqueue("once")
    age_rows()
    work = maintenance(redis_db)
    work.relay.run()  # pushed to this primary (a no-op: it is there), then never again
    assert run_jobs() == 1
    redis_db.delete(keys.job_key(handle.id))  # its retention ran out
    for _ in range(3):
        work.relay.run()
    assert queued(redis_db) == []
    assert run_jobs() == 0
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["once"]


def test_a_pass_never_waits_for_a_replica_that_is_not_connected(redis_db):
    for n in range(3):
        jobs.record.enqueue(f"w{n}")
    age_rows()
    work = maintenance(redis_db)
    for _ in range(3):
        started = time.monotonic()
        work.relay.run()
        assert time.monotonic() - started < TIMEOUT / 2
    assert OutboxEntry.objects.count() == 3  # kept: no replica confirmed them


def test_rows_already_pushed_do_not_hold_back_a_row_whose_push_was_missed(redis_db, settings):
    for n in range(3):
        jobs.record.enqueue(f"kept{n}")
    age_rows(10)
    work = maintenance(redis_db)
    work.relay.run(batch=2)
    work.relay.run(batch=2)  # the oldest rows, each pushed once, are not read again
    assert set(OutboxEntry.objects.values_list("pushed_to", flat=True)) == {
        read_primary(Store.of(redis_db)).run_id
    }
    missed = jobs.record.enqueue("missed")  # as if its push had not happened
    redis_db.delete(keys.job_key(missed.id))
    redis_db.lrem(keys.queue_key("default"), 0, missed.id)
    age_rows(5)
    work.relay.run(batch=2)
    assert missed.id in queued(redis_db)


def test_a_job_that_started_leaves_the_outbox(redis_db):
    handle = jobs.record.enqueue("started")
    other = jobs.record.enqueue("waiting")
    work = maintenance(redis_db)
    work.ledger.saw([(handle.id, "default")])
    work.ledger.settle()
    assert list(OutboxEntry.objects.values_list("id", flat=True)) == [other.id]


def test_a_new_primary_gets_the_rows_again(redis_db):
    handle = jobs.record.enqueue("lost")
    age_rows()
    work = maintenance(redis_db)
    work.relay.run()
    # A failover to a replica that never had the push: another server, without the job.
    OutboxEntry.objects.update(pushed_to="the-old-primary")
    redis_db.delete(keys.job_key(handle.id))
    redis_db.lrem(keys.queue_key("default"), 0, handle.id)
    work.relay.run()
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.get().pushed_to == read_primary(Store.of(redis_db)).run_id
    assert run_jobs() == 1


def test_rows_go_once_the_replicas_asked_for_confirm(redis_db, settings):
    jobs.record.enqueue("confirmed")
    age_rows()
    work = maintenance(redis_db)
    work.relay.run()
    assert OutboxEntry.objects.exists()
    settings.JOBS = {**settings.JOBS, "REPLICAS": 0}  # as many as are connected: WAIT confirms at once
    work.relay.run()
    assert not OutboxEntry.objects.exists()
