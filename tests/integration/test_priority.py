"""Priorities within a queue, in process against real Redis: among the ready jobs the highest
priority starts first, equal ones in FIFO order, and every path that makes a job ready again
(retry, hand-back, promotion, the outbox relay, a requeue, a chain's next page) keeps its place."""

from __future__ import annotations

import datetime as dt

import pytest
import redis
from django.db import transaction
from django.test import override_settings

from django_jobs import job
from django_jobs.core import payload
from django_jobs.failures import deadletter
from django_jobs.flow.pausing import Held
from django_jobs.models import OutboxEntry
from django_jobs.ops import inspection as inspect
from django_jobs.store import LEASES, CancelResult, Settled, Store, keys, rq_timestamp
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from django_jobs.workflows.chains import chain
from tests.chaos import DOWN
from tests.conftest import wait_for
from tests.integration.dashboard_support import record
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # a cancel deletes outbox rows

HIGH, LOW = keys.priority_keys("default")


def started() -> list[str]:
    """The keys the jobs recorded, in the order they ran."""
    return list(SideEffect.objects.order_by("pk").values_list("key", flat=True))


def enqueue(*pairs: tuple[str, int]) -> None:
    for key, priority in pairs:
        jobs.record.options(priority=priority).enqueue(key)


def claim(store: Store, nonce: str):
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60
    )
    assert claimed is not None
    return claimed


def test_the_highest_priority_starts_first_and_equal_ones_in_fifo_order():
    enqueue(("a0", 0), ("b5", 5), ("c-3", -3), ("d5", 5), ("e0", 0), ("f100", 100))
    enqueue(("g-100", -100), ("h-3", -3), ("i1", 1), ("j5", 5), ("k0", 0))
    run_jobs()
    assert started() == ["f100", "b5", "d5", "j5", "i1", "a0", "e0", "k0", "c-3", "h-3", "g-100"]


def test_a_negative_priority_waits_for_every_ready_plain_job_even_later_ones():
    enqueue(("low1", -1), ("low2", -50))
    jobs.record.enqueue_many([(f"plain{i}",) for i in range(3)])
    run_jobs()
    assert started() == ["plain0", "plain1", "plain2", "low1", "low2"]


def test_plain_jobs_stay_in_rqs_list_and_only_prioritized_hashes_record_a_priority(redis_db):
    plain = jobs.record.enqueue("plain")
    urgent = jobs.record.options(priority=7).enqueue("urgent")
    assert redis_db.lrange("rq:queue:default", 0, -1) == [plain.id.encode()]
    assert redis_db.zrange(HIGH, 0, -1) == [urgent.id.encode()]
    assert redis_db.hget(f"rq:job:{plain.id}", "dj_priority") is None
    assert redis_db.hget(f"rq:job:{urgent.id}", "dj_priority") == b"7"


def test_a_job_types_priority_applies_to_every_enqueue_unless_options_replace_it(restore_registry):
    @job(name="tests.prio.urgent", timeout=10, priority=50)
    def urgent(key: str) -> None:
        SideEffect.objects.create(key=key)

    jobs.record.enqueue("plain")
    urgent.enqueue_many([("u1",), ("u2",)])  # one push, FIFO within it
    urgent.options(priority=-5).enqueue("demoted")
    urgent.enqueue_in(0, "u3")
    run_jobs()
    assert started() == ["u1", "u2", "u3", "plain", "demoted"]


def test_a_retry_keeps_its_priority(redis_db):
    handle = jobs.fails_then_succeeds.options(priority=9).enqueue("r", 1)
    run_jobs()  # the first attempt fails: the retry waits out its backoff in the scheduled set
    assert redis_db.zscore("rq:scheduled:default", handle.id) is not None
    enqueue(("zero", 0), ("eight", 8))
    wait_for(lambda: (Store.of(redis_db).next_due(["default"]) or 0) <= 0)
    run_jobs()  # promoted into its priority: ahead of both
    assert [key for key in started() if not key.startswith("attempt:")] == ["r", "eight", "zero"]


def test_a_job_handed_back_or_lost_returns_to_the_head_of_its_priority(redis_db):
    enqueue(("first", 5), ("second", 5), ("plain", 0))
    store = Store.of(redis_db)
    claimed = claim(store, "n1")
    assert store.release(claimed.token, claimed.queue, 60) is Settled.DONE  # shutdown: no attempt spent
    again = claim(store, "n2")
    assert again.id == claimed.id
    died = store.fail(again.token, again.queue, delay=0, fields={}, finished_ttl=60)  # its worker died
    assert died is Settled.DONE
    run_jobs()
    assert started() == ["first", "second", "plain"]


def test_a_delayed_job_is_promoted_to_the_tail_of_its_priority(redis_db):
    late = jobs.record.options(delay=0.2, priority=5).enqueue("late5")
    enqueue(("early5", 5), ("six", 6), ("zero", 0))
    assert redis_db.zscore(HIGH, late.id) is None  # not ready yet
    wait_for(lambda: (Store.of(redis_db).next_due(["default"]) or 0) <= 0)
    run_jobs()
    assert started() == ["six", "early5", "late5", "zero"]


def test_a_cancelled_prioritized_job_leaves_its_priority_set_and_never_runs(redis_db):
    enqueue(("kept5", 5), ("kept-5", -5))
    doomed = [jobs.record.options(priority=p).enqueue(f"doomed{p}") for p in (5, -5)]
    assert [handle.cancel() for handle in doomed] == [CancelResult.CANCELLED] * 2
    assert redis_db.zcard(HIGH) == redis_db.zcard(LOW) == 1
    run_jobs()
    assert started() == ["kept5", "kept-5"]


def test_a_claim_that_cannot_lease_puts_a_prioritized_id_back_in_its_place(redis_db):
    enqueue(("a", 5), ("b", 5))
    before = redis_db.zrange(HIGH, 0, -1, withscores=True)
    redis_db.set(LEASES, "not a sorted set")
    with pytest.raises(redis.ResponseError):
        claim(Store.of(redis_db), "n")
    assert redis_db.zrange(HIGH, 0, -1, withscores=True) == before
    redis_db.delete(LEASES)
    run_jobs()
    assert started() == ["a", "b"]


@pytest.mark.usefixtures("fast")
def test_jobs_enqueued_in_a_transaction_keep_their_priority_through_the_outbox(redis_db):
    enqueue(("before2", 2), ("before-1", -1))
    batch = [(f"t{i}:{p}", p) for i, p in enumerate([2, -1, 0, 2, 3, -1, 2, 0, -1, 3])]
    with transaction.atomic():
        enqueue(*batch)
        assert redis_db.zcard(HIGH) == 1  # nothing reaches Redis before the commit
    assert sorted(OutboxEntry.objects.values_list("priority", flat=True)) == sorted(p for _, p in batch)
    assert redis_db.zcard(HIGH) == 6 and redis_db.zcard(LOW) == 4  # pushed in one go at commit
    run_jobs()
    everything = [("before2", 2), ("before-1", -1), *batch]
    expected = [key for _, (key, _) in sorted(enumerate(everything), key=lambda item: (-item[1][1], item[0]))]
    assert started() == expected


@pytest.mark.usefixtures("fast")
def test_the_relay_pushes_an_outbox_row_with_its_priority(redis_db):
    with override_settings(RQ_QUEUES={"default": DOWN}), transaction.atomic():
        enqueue(("r-1", -1), ("r0", 0), ("r2", 2))
    assert sorted(OutboxEntry.objects.values_list("priority", flat=True)) == [-1, 0, 2]
    OutboxEntry.objects.update(created_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    Maintenance(Store(redis_db), ["default"], 0.1).relay.run()
    assert OutboxEntry.objects.count() == 0
    run_jobs()
    assert started() == ["r2", "r0", "r-1"]


def test_a_requeued_dead_letter_gets_its_job_types_priority(redis_db, restore_registry):
    @job(name="tests.prio.requeued", timeout=10, priority=-20)
    def requeued(key: str) -> None:
        SideEffect.objects.create(key=key)

    entry = record("tests.prio.requeued", ["again"])
    done = deadletter.requeue([entry])
    assert redis_db.zrange(LOW, 0, -1) == [done.entries[0].requeued_job_id.encode()]
    jobs.record.enqueue("plain")
    run_jobs()
    assert started() == ["plain", "again"]


def test_every_page_of_a_chain_is_queued_with_the_chains_priority(redis_db, restore_registry):
    @chain(name="tests.prio.chain", timeout=10, priority=3)
    def pages(cursor, *, last):
        SideEffect.objects.create(key=f"page{cursor or 0}")
        return None if (cursor or 0) >= last else (cursor or 0) + 1

    pages.start(last=1)
    jobs.record.enqueue("plain")
    run_jobs(limit=1)  # the first page, ahead of the plain job; it queues the next page
    assert redis_db.zcard(HIGH) == 1
    run_jobs()
    assert started() == ["page0", "page1", "plain"]


def test_queue_depth_and_oldest_age_count_the_prioritized_jobs(redis_db):
    enqueue(("p0", 0), ("p5", 5), ("p5b", 5), ("n1", -1))
    old = jobs.record.options(priority=-5).enqueue("n5")  # behind n1: not the head of the low set
    ten_minutes_ago = rq_timestamp(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10))
    redis_db.hset(f"rq:job:{old.id}", "enqueued_at", ten_minutes_ago)
    (server,) = inspect.servers(["default"])
    (queue,) = server.queues
    assert queue.depth == 5
    assert 590 < (queue.oldest_age or 0) < 1200  # the oldest job, whatever its priority
    run_jobs()
    (server,) = inspect.servers(["default"])
    assert (server.queues[0].depth, server.queues[0].oldest_age) == (0, None)


def _claim_with(store: Store, nonce: str, prioritized: frozenset[str]) -> str:
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        prioritized=prioritized,
    )  # fmt: skip
    assert claimed is not None
    return payload.loads(claimed.record.data)[1][0]


def test_a_claim_told_the_high_set_was_empty_asks_it_once_the_list_is_empty(redis_db):
    """The documented window: a work process reads once a second which high sets hold jobs; until its
    reading sees a new prioritized job, that job waits only behind the plain jobs claimed meanwhile."""
    store = Store.of(redis_db)
    enqueue(("plain0", 0), ("plain1", 0), ("high", 5), ("low", -5))
    assert _claim_with(store, "1", frozenset()) == "plain0"  # the high set is not asked first
    assert _claim_with(store, "2", frozenset({"default"})) == "high"  # once the reading saw it
    enqueue(("high2", 9))
    assert _claim_with(store, "3", frozenset()) == "plain1"
    assert _claim_with(store, "4", frozenset()) == "high2"  # the list is empty: never left behind
    assert _claim_with(store, "5", frozenset()) == "low"


def test_a_work_process_reads_which_queues_hold_prioritized_jobs(redis_db, monkeypatch):
    jobs.record.options(priority=-5).enqueue("low")  # a low set alone is asked after the list anyway
    held = Held(Store.of(redis_db), ["default", "emails"])
    assert held.claim().prioritized == frozenset()
    jobs.record.options(priority=5).enqueue("high")
    assert held.claim().prioritized == frozenset()  # read at most once a second
    monkeypatch.setattr(held, "_next", 0.0)
    assert held.claim().prioritized == frozenset({"default"})
