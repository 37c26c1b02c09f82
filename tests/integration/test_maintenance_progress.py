"""Every maintenance loop makes progress past what it cannot handle.

Garbage planted in Redis (or an outbox row that can never be pushed) is quarantined as a dead
letter with its raw data, or moved behind the other items; it never stops the loop for the rest.
"""

from __future__ import annotations

import base64
import json
import logging

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import DYING, LEASES, LOST, Store, surrogate_id
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.chaos import DOWN
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])  # the relay visits both


def maintenance(redis_db, queues=("default",)):
    return Maintenance(Store(redis_db), list(queues), 0.1)


def lose_a_running_job(redis_db, key="survivor"):
    """A job claimed by a worker that died: its lease has expired, the next maintenance pass reaps it."""
    handle = jobs.record.enqueue(key)
    _, claimed, _ = Store(redis_db).complete_and_claim(
        ["default"], finished=None, worker_name="dead", lease_seconds=60, nonce="n1", finished_ttl=60
    )
    assert claimed is not None and claimed.id == handle.id
    redis_db.zadd(LEASES, {claimed.token: 1})  # expired long ago
    return handle


def settle_lost(redis_db, passes=5):
    loop = maintenance(redis_db)
    for _ in range(passes):
        loop.reaper.run()


def raw_of(entry):
    return json.loads(entry.raw)


def original(value):
    """The exact bytes a snapshot value stands for."""
    return base64.b64decode(value["base64"]) if isinstance(value, dict) else value.encode()


# --- the LOST set -------------------------------------------------------------------------------

GARBAGE = {
    "not UTF-8": (b"\xff\xfe\x00job:n", None),
    "id too long": (b"x" * 100 + b":n", None),
    "no colon": (b"nocolon", None),
    "not a hash": (b"strkey:n", ("set", b"rq:job:strkey", b"garbage")),
    "no origin": (b"orphan:n", ("hset", b"rq:job:orphan", b"status", b"started")),
    "nonce not UTF-8": (b"real:\xff", ("hset", b"rq:job:real", b"origin", b"default")),
    "queue not UTF-8": (b"badq:n", ("hset", b"rq:job:badq", b"origin", b"\xff")),
}


@pytest.mark.parametrize("kind", GARBAGE)
def test_an_unreadable_lost_entry_is_quarantined_and_a_lost_job_is_still_settled(redis_db, kind, caplog):
    member, plant = GARBAGE[kind]
    if plant:
        getattr(redis_db, plant[0])(*plant[1:])
    redis_db.zadd(LOST, {member: 0})
    handle = lose_a_running_job(redis_db)
    with caplog.at_level(logging.WARNING, logger="django_jobs"):
        settle_lost(redis_db, passes=1)
    assert redis_db.lrange("rq:queue:default", 0, -1) == [handle.id.encode()]  # back, to run again
    assert redis_db.zcard(LOST) == 0
    entry = DeadLetter.objects.get()
    assert entry.reason == DeadLetter.Reason.UNREADABLE
    assert original(raw_of(entry)["djjobs:member"]) == member
    assert "Quarantined" in caplog.text
    run_jobs()
    assert SideEffect.objects.filter(key="survivor").exists()


def test_an_invalid_id_is_filed_under_a_stable_surrogate(redis_db):
    redis_db.zadd(LOST, {b"\xff\xfe:n1": 0})
    settle_lost(redis_db, passes=1)
    redis_db.zadd(LOST, {b"\xff\xfe:n2": 0})  # found again: the same row, not a second one
    settle_lost(redis_db, passes=1)
    entry = DeadLetter.objects.get()
    assert entry.job_id == surrogate_id(b"\xff\xfe")
    assert original(raw_of(entry)["djjobs:original job_id"]) == b"\xff\xfe"


def test_150_vanished_leases_are_dead_lettered_and_do_not_hide_a_lost_job(redis_db):
    redis_db.zadd(LOST, {f"gone{i}:n": 0 for i in range(150)})  # their hashes were evicted
    handle = lose_a_running_job(redis_db)
    settle_lost(redis_db, passes=3)
    assert redis_db.lrange("rq:queue:default", 0, -1) == [handle.id.encode()]
    vanished = DeadLetter.objects.filter(reason=DeadLetter.Reason.VANISHED)
    assert vanished.count() == 150
    assert DeadLetter.objects.open().quarantined().count() == 150
    assert vanished.filter(job_id="gone7").exists()
    assert redis_db.zcard(LOST) == 0


def test_lost_jobs_of_queues_served_elsewhere_do_not_hide_ours(redis_db):
    for i in range(150):
        redis_db.hset(f"rq:job:other{i}", mapping={"origin": "emails", "status": "started"})
    redis_db.zadd(LOST, {f"other{i}:n": 0 for i in range(150)})
    handle = lose_a_running_job(redis_db)
    settle_lost(redis_db, passes=3)
    assert redis_db.lrange("rq:queue:default", 0, -1) == [handle.id.encode()]
    assert redis_db.zcard(LOST) == 150  # left for the runjobs that serves "emails", behind the rest
    assert not DeadLetter.objects.exists()


# --- the DYING set ------------------------------------------------------------------------------


def dying_job(redis_db, job_id, **fields):
    redis_db.hset(
        f"rq:job:{job_id}",
        mapping={
            "origin": "default",
            "data": '["tests.record",null,["k"],{}]',
            "dj_reason": "permanent",
            **fields,
        },
    )
    redis_db.zadd(DYING, {job_id: 0})


def test_150_unwritable_dying_entries_do_not_block_a_later_dead_letter(redis_db):
    for i in range(50):
        redis_db.zadd(DYING, {b"\xff" + str(i).encode(): 0})  # not UTF-8
        redis_db.zadd(DYING, {b"y" * 100 + str(i).encode(): 0})  # longer than any id column
        dying_job(redis_db, f"nul{i}", dj_message="bad \x00 byte", exc_info="Traceback \x00")
    dying_job(redis_db, "healthy")
    redis_db.zadd(DYING, {"healthy": 1})  # the newest
    maintenance(redis_db).dying.run()
    maintenance(redis_db).dying.run()
    assert DeadLetter.objects.filter(job_id="healthy").exists()
    assert DeadLetter.objects.count() == 151
    assert redis_db.zcard(DYING) == 0
    nul = DeadLetter.objects.get(job_id="nul3")
    assert nul.message == "bad \\x00 byte" and nul.reason == DeadLetter.Reason.PERMANENT
    assert raw_of(nul)["dj_message"] == "bad \x00 byte"  # the original, losslessly


def test_a_dying_job_whose_hash_vanished_is_dead_lettered_as_vanished(redis_db):
    redis_db.zadd(DYING, {"evicted": 0})
    maintenance(redis_db).dying.run()
    assert DeadLetter.objects.get(job_id="evicted").reason == DeadLetter.Reason.VANISHED
    assert redis_db.zcard(DYING) == 0


def test_scheduled_ids_without_a_job_hash_do_not_stop_promotion(redis_db):
    handle = jobs.record.enqueue("later")
    redis_db.lpop("rq:queue:default")
    redis_db.zadd("rq:scheduled:default", {handle.id: 2, "evicted": 0, "strkey": 1})
    redis_db.set("rq:job:strkey", "garbage")
    Store(redis_db).maintain(["default"])
    assert redis_db.lrange("rq:queue:default", 0, -1) == [handle.id.encode()]
    assert set(redis_db.zrange(DYING, 0, -1)) == {b"evicted", b"strkey"}
    assert not redis_db.exists("rq:job:evicted")  # not recreated as a hash of two fields


# --- the outbox relay ---------------------------------------------------------------------------


def outbox_row(queue="default", key="k", **extra):
    data = json.dumps(["tests.record", None, [key], {}])
    row = OutboxEntry(id=f"{queue}{key}", job_name="tests.record", queue=queue, data=data, timeout=10)
    for name, value in extra.items():
        setattr(row, name, value)
    row.created_at = row.created_at.replace(year=2000)
    row.save()
    return row


@pytest.mark.usefixtures("fast")
def test_a_row_whose_queue_was_removed_becomes_a_dead_letter_and_the_rest_are_pushed(redis_db):
    outbox_row("gone", "old")
    outbox_row("default", "new")
    maintenance(redis_db).relay.run()
    assert redis_db.lrange("rq:queue:default", 0, -1) == [b"defaultnew"]
    entry = DeadLetter.objects.get(job_id="goneold")
    assert entry.reason == DeadLetter.Reason.UNREADABLE and entry.queue == "gone" and entry.args == ["old"]
    assert not OutboxEntry.objects.exists()


@pytest.mark.usefixtures("fast")
def test_a_row_with_an_invalid_id_is_quarantined_under_a_surrogate(redis_db):
    outbox_row("default", "bad", id="not/valid id")
    outbox_row("default", "good")
    maintenance(redis_db).relay.run()
    assert redis_db.lrange("rq:queue:default", 0, -1) == [b"defaultgood"]
    assert DeadLetter.objects.get().job_id == surrogate_id(b"not/valid id")
    assert not OutboxEntry.objects.exists()


@pytest.mark.usefixtures("fast")
def test_a_redis_that_is_down_holds_back_only_its_own_rows(redis_db, settings):
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "emails": DOWN}
    for i in range(3):
        outbox_row("emails", f"e{i}")  # the oldest, on a Redis that is down
    outbox_row("default", "d")
    maintenance(redis_db).relay.run(batch=2)  # the down rows fill a whole batch: look behind them
    assert redis_db.lrange("rq:queue:default", 0, -1) == [b"defaultd"]
    assert sorted(OutboxEntry.objects.values_list("queue", flat=True)) == ["emails"] * 3
    assert not DeadLetter.objects.exists()  # waiting, not lost


@pytest.mark.usefixtures("fast")
def test_a_row_that_fails_twice_the_same_way_is_quarantined_and_others_go_on(redis_db):
    redis_db.hset("djjobs:unique:report", "not", "a marker")  # the push script refuses this row
    outbox_row("emails", "unique", options={"unique_key": "report"})
    outbox_row("emails", "now")
    loop = maintenance(redis_db)
    loop.relay.run()
    assert redis_db.lrange("rq:queue:emails", 0, -1) == [b"emailsnow"]
    assert list(OutboxEntry.objects.values_list("pk", flat=True)) == ["emailsunique"]  # once: retried
    loop.relay.run()
    entry = DeadLetter.objects.get(job_id="emailsunique")
    assert entry.reason == DeadLetter.Reason.UNREADABLE and "WRONGTYPE" in entry.message
    assert not OutboxEntry.objects.exists()


# --- fuzz: whatever LOST and DYING hold ------------------------------------------------------------


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ids=st.lists(st.binary(max_size=70), max_size=4, unique=True),
    fields=st.dictionaries(st.binary(max_size=12), st.binary(max_size=40), max_size=4),
    origin=st.sampled_from([b"default", b"\xff", None]),
    data=st.sampled_from([b'["tests.record",null,["f"],{}]', b"\x00", b"[1e999, null]", None]),
)
def test_every_planted_item_is_settled_or_quarantined(redis_db, ids, fields, origin, data):
    redis_db.flushdb()
    planted = {**fields, **({b"origin": origin} if origin else {}), **({b"data": data} if data else {})}
    for raw in ids:
        if planted:
            redis_db.hset(b"rq:job:" + raw, mapping=planted)
        redis_db.zadd(LOST, {raw + b":n": 0})
        redis_db.zadd(DYING, {raw: 0})
    loop = maintenance(redis_db)
    for _ in range(2):
        loop.reaper.run()
        loop.dying.run()
    assert redis_db.zcard(LOST) == 0
    assert redis_db.zcard(DYING) == 0
    DeadLetter.objects.all().delete()


@pytest.mark.usefixtures("fast")
def test_a_redis_refusing_writes_keeps_rows_waiting_never_quarantined(private_redis):
    client = redis.Redis.from_url(private_redis.url)
    outbox_row("default", "full")
    client.config_set("maxmemory", 1)  # every write is refused with OOM: Redis's problem, not the row's
    loop = maintenance(client)
    for _ in range(3):
        loop.relay.paused.clear()  # so no pause hides the row: it fails the same way every time
        loop.relay.run()
    assert list(OutboxEntry.objects.values_list("pk", flat=True)) == ["defaultfull"]
    assert not DeadLetter.objects.exists()
    client.config_set("maxmemory", 0)
    loop.relay.paused.clear()
    loop.relay.run()
    assert client.lrange("rq:queue:default", 0, -1) == [b"defaultfull"]
    assert not OutboxEntry.objects.exists()


@pytest.mark.parametrize("raw_id", [b"has space", b"\xff\xfe", b"x" * 65, b"new\nline", b"a:b"])
def test_a_queued_job_whose_id_breaks_the_id_rule_never_runs_and_is_quarantined(redis_db, raw_id):
    """Its hash is a valid job: only the id is wrong, and no worker ever holds it (its reports to the
    supervisor carry the id, which must not be able to garble them)."""
    valid = jobs.record.enqueue("planted")
    redis_db.lpop("rq:queue:default")
    redis_db.rename(f"rq:job:{valid.id}", b"rq:job:" + raw_id)
    redis_db.rpush("rq:queue:default", raw_id)
    assert run_jobs() == 0
    redis_db.zadd(DYING, {raw_id: 0})  # as old as a dying entry gets
    maintenance(redis_db).dying.run()
    entry = DeadLetter.objects.get(job_id=surrogate_id(raw_id))
    assert entry.reason == DeadLetter.Reason.UNREADABLE
    assert not SideEffect.objects.exists()
    assert redis_db.zcard(DYING) == 0
