"""A claim of several jobs (``Store.claim_batch``) leases what as many single claims one after another
would, in one round trip, and completes several jobs in the same one; the audit finds each job in one
state throughout."""

from __future__ import annotations

import time

import pytest

from django_jobs.core import registry
from django_jobs.store import LEASES, Finished, Store
from django_jobs.store.audit import audit
from django_jobs.store.lifecycle import F, State
from django_jobs.store.read import where
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def batch(
    store: Store, nonce: str, want: int, *, also: tuple[Finished, ...] = (), done: Finished | None = None
):
    return store.claim_batch(
        ["default"], finished=done, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(), want=want, also=also,
    )  # fmt: skip


def single(store: Store, nonce: str) -> str | None:
    claimed = batch(store, nonce, 1).leased
    return claimed[0].id if claimed else None


def test_a_batch_leases_what_single_claims_would_in_their_order(redis_db):
    store = Store.of(redis_db)
    ids = [jobs.record.options(priority=p).enqueue(f"j{n}").id for n, p in enumerate([0, 5, 0, -3, 9, 0, 5])]
    got = batch(store, "b", 5)
    expected = [ids[4], ids[1], ids[6], ids[0], ids[2]]  # priority first, enqueue order within one
    assert [c.id for c in got.leased] == expected
    assert all(c.attempt == 1 and c.token == f"{c.id}:b" for c in got.leased)
    assert {where(store, i).state for i in expected} == {State.RUNNING}
    assert [single(store, f"s{n}") for n in range(3)] == [ids[5], ids[3], None]
    assert audit(store).ok


def test_an_idle_queue_hands_out_the_one_job_it_has_at_once(redis_db):
    store = Store.of(redis_db)
    only = jobs.record.enqueue("alone").id
    assert [c.id for c in batch(store, "b", 8).leased] == [only]
    assert batch(store, "c", 8).leased == ()


def test_a_claim_completes_several_jobs_and_leases_the_next_batch_in_one_round_trip(redis_db):
    store = Store.of(redis_db)
    for n in range(6):
        jobs.record.enqueue(f"j{n}")
    first = batch(store, "b", 3).leased
    done = [Finished(c.token, c.queue, result='{"n": 1}' if i == 0 else None) for i, c in enumerate(first)]
    second = batch(store, "c", 3, done=done[0], also=tuple(done[1:]))
    assert second.finished == 3 and len(second.leased) == 3
    for c in first:
        assert where(store, c.id).state is State.FINISHED
    assert redis_db.hget(f"rq:job:{first[0].id}", F.RESULT) is not None
    assert redis_db.zcard(LEASES) == 3
    gone = Finished(first[1].token, first[1].queue)  # its lease is no longer held: not counted again
    assert batch(store, "d", 1, also=(gone,)).finished == 0
    assert audit(store).ok


def test_each_job_of_a_batch_meets_the_gates(redis_db):
    store = Store.of(redis_db)
    limited = [jobs.solo.enqueue(f"s{n}").id for n in range(3)]  # concurrency 1
    plain = jobs.record.enqueue("p").id
    stale = jobs.record.options(expires=0.01).enqueue("old").id
    time.sleep(0.05)
    got = batch(store, "b", 5)
    assert [c.id for c in got.leased] == [limited[0], plain]  # the other two wait their turn, unspent
    assert [c.id for c in got.expired] == [stale]
    for other in limited[1:]:
        assert where(store, other).state is State.SCHEDULED
        assert redis_db.hget(f"rq:job:{other}", F.ATTEMPT) in (None, b"0")
    assert audit(store).ok


def test_a_batch_ends_after_a_job_of_a_key(redis_db):
    store = Store.of(redis_db)
    keyed = jobs.per_account.enqueue("A", "first").id
    jobs.record.enqueue("behind")
    got = batch(store, "b", 5)
    assert [c.id for c in got.leased] == [keyed]  # its completion, the next claim's first, has its scope


def test_a_completion_with_a_keys_scope_is_refused_among_the_others(redis_db):
    store = Store.of(redis_db)
    jobs.per_account.enqueue("A", "first")
    (claimed,) = batch(store, "b", 1).leased
    scope = registry.limit_scope(claimed.record)
    with pytest.raises(ValueError, match="scope"):
        batch(store, "c", 1, also=(Finished(claimed.token, claimed.queue, scope=scope),))
