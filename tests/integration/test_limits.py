"""Per-job-type rate limits and enqueue-time scheduling, in-process against real Redis."""

from __future__ import annotations

import datetime as dt

import pytest

from django_jobs import job
from django_jobs.core.registry import limits_json
from django_jobs.testing import run_jobs
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_rate_limited_job_waits_without_spending_an_attempt(redis_db):
    handles = jobs.rated.enqueue_many([(f"r{i}",) for i in range(8)])
    run_jobs()
    assert SideEffect.objects.count() == 5
    waiting = [h.id for h in handles if redis_db.zscore("rq:scheduled:default", h.id) is not None]
    assert len(waiting) == 3
    assert {redis_db.hget(f"rq:job:{i}", "dj_attempt") for i in waiting} == {b"0"}


def test_limited_jobs_do_not_hide_the_jobs_queued_behind_them(redis_db):
    jobs.rated.enqueue_many([(f"r{i}",) for i in range(40)])
    jobs.record.enqueue("behind")
    run_jobs()
    assert SideEffect.objects.filter(key="behind").exists()


def test_limits_are_published_under_every_name():
    limits = limits_json()
    assert '"tests.limited": [3, 0, 1, "tests.limited"]' in limits
    assert '"tests.rated": [0, 5, 60.0, "tests.rated"]' in limits


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"rate": "10/fortnight"}, "rate"),
        ({"rate": "0/s"}, "at least one"),
        ({"rate": "many/s"}, "rate"),
    ],
)
def test_bad_limits_fail_at_decoration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        job(timeout=1, name=f"tests.bad_limit_{message}", **kwargs)(lambda: None)


def test_enqueue_at_needs_an_aware_datetime(redis_db):
    with pytest.raises(ValueError, match="aware"):
        jobs.record.enqueue_at(dt.datetime(2030, 1, 1), "naive")
    handle = jobs.record.enqueue_at(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), "later")
    due = redis_db.zscore("rq:scheduled:default", handle.id)
    assert due == pytest.approx((dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).timestamp(), abs=5)


def test_unique_key_allows_one_queued_or_running_job_per_key(redis_db):
    first = jobs.record.options(unique_key="sync:1").enqueue("first")
    jobs.record.options(unique_key="sync:1").enqueue("duplicate")
    other = jobs.record.options(unique_key="sync:2").enqueue("other")
    assert [i.decode() for i in redis_db.lrange("rq:queue:default", 0, -1)] == [first.id, other.id]
    run_jobs()
    again = jobs.record.options(unique_key="sync:1").enqueue("after-finish")  # the first one is done
    run_jobs()
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["after-finish", "first", "other"]
    assert redis_db.get("djjobs:unique:sync:1") == again.id.encode()


def test_unique_key_holds_through_the_outbox(redis_db):
    from django.db import transaction

    with transaction.atomic():
        jobs.record.options(unique_key="k").enqueue("a")
    with transaction.atomic():
        jobs.record.options(unique_key="k").enqueue("b")
    run_jobs()
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["a"]


def test_debounce_lets_the_last_enqueue_in_the_window_win(redis_db):
    import time

    for value in ("v1", "v2", "v3"):
        last = jobs.record.options(unique_key="index:7", debounce=0.3).enqueue(value)
    assert redis_db.zcard("rq:scheduled:default") == 1
    assert redis_db.zscore("rq:scheduled:default", last.id) is not None
    assert run_jobs() == 0  # still inside its window
    time.sleep(0.35)
    assert run_jobs() == 1
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["v3"]


def test_debounce_needs_a_key():
    with pytest.raises(ValueError, match="unique_key"):
        jobs.record.options(debounce=5).enqueue("x")
