"""Limits per key (``limit_key``), in process against real Redis: a job over its key's limit is parked
in its key's line once, keeping its attempts and its turn, while other keys' jobs run; the end of an
attempt of that key wakes the next; maintenance wakes what a wake-up missed; parked jobs are seen and
can be cancelled; the key travels with the job through the outbox and a dead-letter requeue."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import redis
from django.db import transaction
from django.urls import reverse

from django_jobs import CancelResult, JobCancelled, PermanentError, cancel, get_job, job, store
from django_jobs.core import registry
from django_jobs.core.execution import settle_failure
from django_jobs.exceptions import LimitKeyError, WorkerLost
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.ops import inspection as inspect
from django_jobs.ops import overview
from django_jobs.store import LEASES, Claimed, Finished, Settled, Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.integration.dashboard_support import operator
from tests.integration.test_inspect import gauges
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

INDEX = "djjobs:parked:default"


def line(redis_db: redis.Redis, account: str = "A") -> list[str]:
    """The ids parked for ``account``'s turn, first first."""
    return [i.decode() for i in redis_db.zrange(f"{INDEX}\ntests.per_account\n{account}", 0, -1)]


def claim(store_: Store, nonce: str, finished: Finished | None = None, limits: str = "") -> Claimed | None:
    """Complete ``finished``, then claim the next job of the default queue as a worker does."""
    _, claimed, _ = store_.complete_and_claim(
        ["default"], finished=finished, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=limits or registry.limits_json(),
    )  # fmt: skip
    return claimed


def done(claimed: Claimed) -> Finished:
    """The completion of ``claimed`` as the work process sends it: with the key whose slot it frees."""
    return Finished(claimed.token, claimed.queue, scope=registry.limit_scope(claimed.record))


def enqueue(account: str, *keys: str) -> list[str]:
    return [jobs.per_account.enqueue(account, key).id for key in keys]


def test_a_job_over_its_keys_limit_is_parked_in_order_while_other_keys_run(redis_db):
    a = enqueue("A", "a0", "a1", "a2", "a3")
    b = enqueue("B", "b0")
    store_ = Store(redis_db)
    running = claim(store_, "1")
    assert running is not None and running.id == a[0]
    other = claim(store_, "2")
    assert other is not None and other.id == b[0]  # A at its limit does not block B behind it
    assert line(redis_db) == a[1:]
    assert claim(store_, "3") is None  # nothing else is ready
    parked = get_job(a[2])
    assert (parked.status, parked.attempts, parked.parked, parked.limit_key) == ("queued", 0, True, "A")
    assert not get_job(b[0]).parked
    (state,) = inspect.read(Store.of(redis_db), ["default"], dt.datetime.now(dt.UTC)).queues
    assert (state.depth, state.parked, state.parked_is_estimate) == (0, 3, False)
    assert gauges()[("django_jobs_parked_jobs", frozenset({("queue", "default")}))] == 3
    assert next(q for q in overview.snapshot().queues if q.name == "default").parked == 3


def test_the_job_page_says_a_job_waits_for_its_keys_turn_and_shows_its_key_with_the_payload(client, redis_db):
    a = enqueue("tenant-7", "a0", "a1")
    assert claim(Store(redis_db), "1") is not None and claim(Store(redis_db), "2") is None
    url = reverse("admin:django_jobs_deadletter_job", args=[a[1]])
    operator(client, "view_deadletter")
    html = client.get(url).content.decode()
    assert "parked behind its key&#x27;s limit of 1 at a time" in html
    assert "tenant-7" not in html  # the key is the payload's
    operator(client, "view_deadletter", "view_deadletter_payload", username="payload-op")
    html = client.get(url).content.decode()
    assert "<th>limit key</th><td>tenant-7</td>" in html
    assert "parked behind key `tenant-7`&#x27;s limit" in html


def test_past_the_lines_it_counts_the_parked_count_is_a_lower_bound(redis_db, monkeypatch):
    monkeypatch.setattr(inspect, "PARKED_SAMPLE", 1)
    for account in ("A", "B"):
        enqueue(account, "first", "second", "third")
    store_ = Store(redis_db)
    assert claim(store_, "1") is not None and claim(store_, "2") is not None and claim(store_, "3") is None
    (state,) = inspect.read(Store.of(redis_db), ["default"], dt.datetime.now(dt.UTC)).queues
    assert (state.parked, state.parked_is_estimate) == (2, True)  # one line of two counted


def test_jobs_of_one_key_run_one_at_a_time_in_the_order_they_were_enqueued(redis_db):
    enqueue("A", *(f"a{i}" for i in range(5)))
    enqueue("B", "b0", "b1")
    assert run_jobs() == 7
    ran = [key.split("|")[:2] for key in SideEffect.objects.order_by("pk").values_list("key", flat=True)]
    assert [key for account, key in ran if account == "A"] == [f"a{i}" for i in range(5)]
    assert sorted(key for account, key in ran if account == "B") == ["b0", "b1"]
    assert not redis_db.keys("djjobs:parked*") and not redis_db.keys("djjobs:slots:*")


def end_as(how: str, store_: Store, claimed: Claimed) -> None:
    if how == "retry":
        settle_failure(store_, claimed, ConnectionError("upstream down"))
    elif how == "dead":
        settle_failure(store_, claimed, PermanentError("voided"))
    else:
        assert cancel(claimed.id) is CancelResult.REQUESTED
        settle_failure(store_, claimed, JobCancelled())


@pytest.mark.parametrize("how", ["complete", "retry", "dead", "cancel"])
def test_the_end_of_an_attempt_gives_the_next_parked_job_of_its_key_its_turn(redis_db, how):
    a = enqueue("A", "a0", "a1", "a2")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    if how == "complete":
        woken = claim(store_, "3", done(first))
    else:
        end_as(how, store_, first)
        woken = claim(store_, "3")
    assert woken is not None and woken.id == a[1]
    assert line(redis_db) == a[2:]
    fields = redis_db.hgetall(f"rq:job:{a[1]}")
    assert b"dj_line" not in fields and b"dj_turn" not in fields  # its turn came
    assert fields[b"dj_attempt"] == b"1"  # parking spent no attempt


def test_a_newcomer_waits_behind_the_parked_jobs_and_never_takes_a_woken_jobs_slot(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None  # a1 parked
    assert store_.complete(done(first), 60)  # a1 woken: back on the queue, holding A's slot
    eager = jobs.per_account.options(priority=50).enqueue("A", "eager").id  # claimed before a1
    woken = claim(store_, "3")
    assert woken is not None and woken.id == a[1]
    assert line(redis_db) == [eager]  # the newcomer found A's slot held and waits its turn


def test_a_woken_job_that_finds_no_room_goes_back_to_its_own_turn(redis_db, monkeypatch):
    monkeypatch.setattr(store.model, "TURN_HOLD", 0.0)  # the woken job's hold lapses at once
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    turn = redis_db.hget(f"rq:job:{a[1]}", "dj_turn")
    assert store_.complete(done(first), 60)
    eager = jobs.per_account.options(priority=50).enqueue("A", "eager").id
    taken = claim(store_, "3")
    assert taken is not None and taken.id == eager  # the lapsed hold left the slot free
    assert claim(store_, "4") is None  # a1 found A full: parked again...
    later = enqueue("A", "later")
    assert claim(store_, "5") is None
    assert line(redis_db) == [a[1], *later]  # ... at its own turn, before the newer job
    assert redis_db.hget(f"rq:job:{a[1]}", "dj_turn") == turn


def look_now(redis_db: redis.Redis, store_: Store) -> int:
    """Make A's line due and run a maintenance pass; how many parked jobs it woke."""
    redis_db.zadd(INDEX, {"tests.per_account\nA": 0})
    return store_.maintain(["default"], registry.limits_json())[2]


def test_a_job_whose_worker_was_lost_keeps_its_keys_slot_and_turn(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    redis_db.zadd(LEASES, {first.token: 0})  # its lease expired: the reaper takes the attempt back...
    assert store_.maintain(["default"], registry.limits_json())[0] == 1
    assert look_now(redis_db, store_) == 0  # ...and it holds A's slot until it is settled:
    settle_failure(store_, first, WorkerLost("gone"), lost=True)  # back to the head of the queue
    assert look_now(redis_db, store_) == 0  # holding A's slot for itself
    rerun = claim(store_, "3")
    assert rerun is not None and rerun.id == a[0]
    assert line(redis_db) == [a[1]]


def test_a_job_handed_back_at_shutdown_keeps_its_keys_slot_and_turn(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert store_.release(first.token, "default", 60, registry.limit_scope(first.record)) is Settled.DONE
    assert look_now(redis_db, store_) == 0
    rerun = claim(store_, "3")
    assert rerun is not None and rerun.id == a[0]
    assert line(redis_db) == [a[1]]


def test_maintenance_wakes_a_line_whose_wake_up_was_missed(redis_db):
    a = enqueue("A", "a0", "a1", "a2")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    redis_db.zadd(INDEX, {"tests.per_account\nA": 0})  # due now
    limits = registry.limits_json()
    assert store_.maintain(["default"], limits)[2] == 0  # A's slot is held: nothing to wake
    assert redis_db.zscore(INDEX, "tests.per_account\nA") > redis_db.time()[0]  # looked at again later
    redis_db.zrem(LEASES, first.token)  # its worker vanished without a word (nobody settles it)
    redis_db.zadd(INDEX, {"tests.per_account\nA": 0})
    assert store_.maintain(["default"], limits)[2] == 1
    woken = claim(store_, "3")
    assert woken is not None and woken.id == a[1]


def test_maintenance_releases_the_parked_jobs_of_a_type_that_lost_its_limit_key(redis_db):
    a = enqueue("A", "a0", "a1", "a2")
    store_ = Store(redis_db)
    assert claim(store_, "1") is not None and claim(store_, "2") is None
    redis_db.zadd(INDEX, {"tests.per_account\nA": 0})
    assert store_.maintain(["default"], "{}")[2] == 2  # a deploy took the limit away: all of them go
    assert not redis_db.exists(INDEX)
    assert not get_job(a[2]).parked  # let go for good: its turn is forgotten
    woken = [claim(store_, nonce, limits="{}") for nonce in ("3", "4")]
    assert [c.id for c in woken if c is not None] == a[1:]


def test_cancelling_a_parked_job_takes_it_out_of_its_line(redis_db):
    a = enqueue("A", "a0", "a1", "a2")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert cancel(a[1]) is CancelResult.CANCELLED
    assert line(redis_db) == [a[2]]
    woken = claim(store_, "3", done(first))
    assert woken is not None and woken.id == a[2]


def test_cancelling_a_woken_job_frees_the_slot_it_held(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert store_.complete(done(first), 60)  # a1 woken, holding A's slot
    assert redis_db.zrange("djjobs:slots:tests.per_account\nA", 0, -1) == [a[1].encode()]
    assert cancel(a[1]) is CancelResult.CANCELLED
    assert not redis_db.exists("djjobs:slots:tests.per_account\nA")
    fresh = enqueue("A", "fresh")
    taken = claim(store_, "3")
    assert taken is not None and taken.id == fresh[0]


def test_a_rate_per_key_parks_the_jobs_over_it_until_its_next_window(redis_db):
    for account in ("A", "B"):
        for n in range(3):
            jobs.per_account_rated.enqueue(account, f"{account}{n}")
    assert run_jobs() == 4  # 2/m for each account
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["A|A0", "A|A1", "B|B0", "B|B1"]
    now = float(redis_db.time()[0])
    for account in ("A", "B"):
        scope = f"tests.per_account_rated\n{account}"
        (parked,) = redis_db.zrange(f"{INDEX}\n{scope}", 0, -1)
        assert redis_db.hget(b"rq:job:" + parked, "dj_attempt") == b"0"
        assert now < redis_db.zscore(INDEX, scope) <= (now // 60 + 1) * 60  # when the next window opens


def test_an_int_and_its_digits_are_one_key(redis_db):
    assert jobs.per_account.limit_value([7, "x"], {}) == jobs.per_account.limit_value(["7", "x"], {}) == "7"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "a string or an int"),
        (1.5, "a string or an int"),
        (True, "a string or an int"),
        (b"A", "a string or an int"),
        ("", "1 to 100 printable characters"),
        ("x" * 101, "1 to 100 printable characters"),
        ("a\nb", "1 to 100 printable characters"),
    ],
)
def test_a_bad_key_is_a_clear_error_at_enqueue_naming_the_job(redis_db, restore_registry, value, message):
    keyed = job(timeout=1, name="tests.keyed_by_value", concurrency=1, limit_key=lambda: value)(lambda: None)
    with pytest.raises(LimitKeyError, match=message) as caught:
        keyed.enqueue()
    assert "tests.keyed_by_value" in str(caught.value)
    assert not redis_db.keys("rq:job:*")


def test_a_limit_key_that_raises_is_a_clear_error_naming_the_job(redis_db):
    with pytest.raises(LimitKeyError, match=r"'tests.per_account'.*TypeError"):
        jobs.per_account.enqueue(key="no account")
    assert not redis_db.keys("rq:job:*")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": 1, "limit_key": "account"}, "callable"),
        ({"limit_key": lambda a: a}, "concurrency= or rate="),
    ],
)
def test_bad_limit_keys_fail_at_decoration(restore_registry, kwargs, message):
    with pytest.raises(ValueError, match=message):
        job(timeout=1, name="tests.bad_limit_key", **kwargs)(lambda a: None)


def test_limits_are_published_per_key():
    assert '"tests.per_account": [1, 0, 1, "tests.per_account", true]' in registry.limits_json()
    assert '"tests.per_account_before_rename": [1, 0, 1, "tests.per_account", true]' in registry.limits_json()


def test_a_job_queued_under_an_old_name_shares_its_keys_limit(redis_db):
    from django_jobs.client.backends.redis import push
    from django_jobs.client.enqueue import build

    old = build("tests.per_account_before_rename", "default", 10, ["A", "old"], {}, limit_key="A")
    push([old])
    new = enqueue("A", "new")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and first.id == old.id and claim(store_, "2") is None
    assert line(redis_db) == new
    woken = claim(store_, "3", done(first))
    assert woken is not None and woken.id == new[0]


@pytest.mark.usefixtures("fast")
def test_the_key_travels_through_the_outbox_and_its_relay(redis_db):
    with transaction.atomic():
        committed = jobs.per_account.enqueue("A", "after commit").id
    assert redis_db.hget(f"rq:job:{committed}", "dj_limit_key") == b"A"
    with transaction.atomic():
        relayed = jobs.per_account.enqueue("B", "relayed").id
        redis_db.set(f"rq:job:{relayed}", "taken")  # the on-commit push will fail on this key
    assert OutboxEntry.objects.get(pk=relayed).limit_key == "B"
    redis_db.delete(f"rq:job:{relayed}")
    OutboxEntry.objects.update(created_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
    Maintenance(Store.of(redis_db), ["default"], 0.1).relay.run()
    assert redis_db.hget(f"rq:job:{relayed}", "dj_limit_key") == b"B"


def dead(job_name: str, args: list[object]) -> DeadLetter:
    return DeadLetter.objects.create(
        job_id=f"dead-{DeadLetter.objects.count()}", job_name=job_name, queue="default", args=args,
        kwargs={}, exception="builtins.ValueError", attempts=1, reason=DeadLetter.Reason.PERMANENT,
    )  # fmt: skip


def test_a_requeued_dead_letter_keeps_its_key_and_one_the_key_refuses_stays_open(redis_db):
    kept, refused = dead("tests.per_account", ["A", "k"]), dead("tests.per_account", [])
    done_ = deadletter.requeue([kept, refused])
    kept.refresh_from_db()
    assert redis_db.hget(f"rq:job:{kept.requeued_job_id}", "dj_limit_key") == b"A"
    assert done_.refused == {"tests.per_account": 1}
    assert DeadLetter.objects.get(pk=refused.pk).status == DeadLetter.Status.OPEN


def test_a_plain_job_carries_no_key_and_touches_no_line(redis_db):
    handle = jobs.record.enqueue("plain")
    assert run_jobs() == 1
    assert not {b"dj_limit_key", b"dj_line", b"dj_turn"} & set(redis_db.hgetall(f"rq:job:{handle.id}"))
    assert not redis_db.keys("djjobs:parked*") and not redis_db.keys("djjobs:slots:*")


# --- with pausing, snooze and expiry ----------------------------------------------------------------

SLOTS = "djjobs:slots:tests.per_account\nA"
HELD = "djjobs:paused:default:tests.per_account"


def pause_after_a_wake_up(redis_db: redis.Redis, store_: Store) -> list[str]:
    """A0 ran, A1 was woken (holding A's slot) and A2 waits in the line; then the type is paused and a
    claim puts A1 back in A's line at its turn."""
    a = enqueue("A", "a0", "a1", "a2")
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert store_.complete(done(first), 60)
    store_.pause("job", "tests.per_account", by="t", reason="")
    assert claim(store_, "3", limits=registry.limits_json(["tests.per_account"])) is None
    assert line(redis_db) == a[1:] and not redis_db.exists(HELD)
    return a


def test_a_paused_keyed_type_holds_its_jobs_in_order_and_they_resume_in_their_keys_turn(redis_db):
    store_ = Store(redis_db)
    a = pause_after_a_wake_up(redis_db, store_)
    assert not redis_db.exists(SLOTS)  # the held job gave back the slot it was woken with
    state = get_job(a[1])
    assert state.paused and state.parked and state.attempts == 0  # held, still owed its key's turn
    assert look_now(redis_db, store_) == 0  # a paused type's line is not woken: it would park again
    assert line(redis_db) == a[1:]
    store_.resume("job", "tests.per_account")
    assert look_now(redis_db, store_) == 1  # resumed: the front of A's line is woken
    resumed = claim(store_, "5")
    assert resumed is not None and resumed.id == a[1]
    assert claim(store_, "6") is None  # one at a time still: A2 waits at the front of A's line
    assert line(redis_db) == [a[2]]


def test_an_attempt_ending_while_its_keyed_type_is_paused_wakes_nobody(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    store_.pause("job", "tests.per_account", by="t", reason="")
    assert store_.complete(done(first), 60)
    assert line(redis_db) == [a[1]] and not redis_db.exists(SLOTS)


def test_a_job_back_with_its_turn_waits_for_an_earlier_turn_of_its_key(redis_db):
    """Whatever moved them (a pause, a hand-back, a wake-up), a job of a key never starts while a job
    of that key with an earlier turn has not started: the slot goes to the earlier one."""
    a = enqueue("A", "a0", "a1", "a2")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert store_.complete(done(first), 60)  # A1 woken, holding A's slot
    woken = redis_db.lpop("rq:queue:default")
    assert woken == a[1].encode()
    redis_db.zadd(f"{INDEX}\ntests.per_account\nA", {a[1]: 0})  # A1 back at the front of A's line
    redis_db.zrem(SLOTS, a[1])
    redis_db.zpopmax(f"{INDEX}\ntests.per_account\nA")  # A2 woken after it, holding the slot
    redis_db.zadd(SLOTS, {a[2]: time.time() + 60})
    redis_db.rpush("rq:queue:default", a[2])
    assert claim(store_, "3") is None  # A2 does not start ahead of A1...
    assert line(redis_db) == [a[1], a[2]]
    assert look_now(redis_db, store_) == 1  # ...A1 is woken in its place
    started = claim(store_, "4")
    assert started is not None and started.id == a[1]


def test_cancelling_a_keyed_job_held_by_a_pause_takes_it_out_of_its_keys_line(redis_db):
    store_ = Store(redis_db)
    a = pause_after_a_wake_up(redis_db, store_)
    assert cancel(a[1]) is CancelResult.CANCELLED
    assert line(redis_db) == [a[2]]  # the other keyed job keeps its place
    assert not {b"dj_parked", b"dj_line", b"dj_turn"} & set(redis_db.hgetall(f"rq:job:{a[1]}"))


def test_a_snoozed_attempt_gives_its_keys_slot_to_the_next_in_line(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    assert store_.snooze(first.token, "default", 60, 60, registry.limit_scope(first.record)) is Settled.DONE
    woken = claim(store_, "3")
    assert woken is not None and woken.id == a[1]
    assert get_job(a[0]).status == "scheduled"


def test_a_woken_job_that_expired_is_dropped_and_gives_its_keys_slot_back(redis_db):
    a = enqueue("A", "a0", "a1")
    store_ = Store(redis_db)
    first = claim(store_, "1")
    assert first is not None and claim(store_, "2") is None
    redis_db.hset(f"rq:job:{a[1]}", "dj_expires", "1")  # its expiry passed while it waited its turn
    assert store_.complete(done(first), 60)  # A1 woken, holding A's slot
    _, claimed, expired = store_.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="3", finished_ttl=60,
        limits=registry.limits_json(),
    )  # fmt: skip
    assert claimed is None and [e.id for e in expired] == [a[1]]
    assert get_job(a[1]).expired
    assert not redis_db.exists(SLOTS)  # a newcomer of A need not wait for the hold to lapse
    fresh = enqueue("A", "fresh")
    taken = claim(store_, "4")
    assert taken is not None and taken.id == fresh[0]
