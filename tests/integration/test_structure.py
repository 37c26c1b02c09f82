"""A queue, lease or scheduled key of the wrong type is moved aside, recorded, and stops failing jobs."""

from __future__ import annotations

import datetime as dt

import pytest
import redis
from django.utils import timezone

from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import LEASES, Store, keys, queue_key, scheduled_key
from django_jobs.store.keys import priority_keys
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])  # the relay visits both


def check(redis_db: redis.Redis) -> None:
    Maintenance(Store(redis_db), ["default", "emails"], 0.1).structures.run()


def moved_keys(redis_db: redis.Redis) -> list[bytes]:
    return sorted(redis_db.scan_iter(match="djjobs:quarantine:*"))


@pytest.mark.parametrize(
    ("key", "plant"),
    [
        (queue_key("default"), lambda r, k: r.set(k, "someone else's value")),
        (scheduled_key("default"), lambda r, k: r.rpush(k, "a", "b")),
        (LEASES, lambda r, k: r.hset(k, "field", "value")),
        (priority_keys("default")[0], lambda r, k: r.rpush(k, "a")),
        (priority_keys("emails")[1], lambda r, k: r.set(k, "someone else's value")),
        (keys.PAUSED, lambda r, k: r.rpush(k, "queue:default")),
        (keys.PARKED, lambda r, k: r.set(k, "someone else's value")),
        (  # a parked list the set of parked lists names
            keys.parked_key("emails", "tests.record"),
            lambda r, k: (r.sadd(keys.PARKED, '["emails", "tests.record"]'), r.set(k, "not a list")),
        ),
    ],
)
def test_a_structure_key_of_the_wrong_type_is_moved_aside_and_recorded(redis_db, key, plant):
    plant(redis_db, key)
    dump = redis_db.dump(key)
    check(redis_db)
    assert not redis_db.exists(key)
    [moved] = moved_keys(redis_db)
    assert moved.startswith(f"djjobs:quarantine:{key}:".encode())
    assert redis_db.dump(moved) == dump  # nothing deleted: moved unchanged
    entry = DeadLetter.objects.get()
    assert entry.reason == DeadLetter.Reason.UNREADABLE
    assert key in entry.message and moved.decode() in entry.message


@pytest.mark.usefixtures("fast")
def test_a_job_enqueued_while_its_queue_key_is_broken_runs_once_the_key_is_moved(redis_db):
    redis_db.set(queue_key("default"), "not a list")
    handle = jobs.record.enqueue("waited")  # the push fails: the job waits in the outbox
    assert OutboxEntry.objects.filter(id=handle.id).exists()
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(seconds=5))
    loop = Maintenance(Store(redis_db), ["default", "emails"], 0.1)
    loop.structures.run()
    loop.relay.run()
    assert redis_db.lrange(queue_key("default"), 0, -1) == [handle.id.encode()]
    assert not OutboxEntry.objects.exists()


def test_keys_of_the_right_type_or_absent_are_left_alone(redis_db):
    handle = jobs.record.enqueue("kept")
    check(redis_db)
    check(redis_db)
    assert redis_db.lrange(queue_key("default"), 0, -1) == [handle.id.encode()]
    assert moved_keys(redis_db) == []
    assert not DeadLetter.objects.exists()


def claim(redis_db: redis.Redis):
    from django_jobs.core.registry import limits_json

    return Store(redis_db).complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=60, nonce="n", finished_ttl=60,
        limits=limits_json(),
    )  # fmt: skip


def break_rate_windows(redis_db: redis.Redis) -> None:
    """The rate counters of tests.rated (5/m) for this minute and the next, as hashes."""
    window = int(redis_db.time()[0] // 60)
    for w in (window, window + 1):
        redis_db.hset(f"djjobs:rate:tests.rated:{w}", "x", "y")


@pytest.mark.parametrize(
    ("enqueue", "breaks"),
    [
        (lambda: jobs.record.enqueue("a"), lambda r: r.set(LEASES, "not a sorted set")),
        (lambda: jobs.limited.enqueue("b", 0), lambda r: r.set("djjobs:slots:tests.limited", "a string")),
        (lambda: jobs.rated.enqueue("c"), break_rate_windows),
    ],
    ids=["lease set", "concurrency slots", "rate counter"],
)
def test_a_claim_that_meets_a_broken_key_puts_the_job_back_untouched(redis_db, enqueue, breaks):
    handle = enqueue()
    before = redis_db.hgetall(f"rq:job:{handle.id}")
    breaks(redis_db)
    with pytest.raises(redis.ResponseError):
        claim(redis_db)
    assert redis_db.lrange(queue_key("default"), 0, -1) == [handle.id.encode()]
    assert redis_db.hgetall(f"rq:job:{handle.id}") == before  # no attempt spent, status unchanged
