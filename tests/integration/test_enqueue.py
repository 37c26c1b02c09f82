"""Enqueue against real Redis and a real database: transactions, the outbox, deduplication."""

from __future__ import annotations

import contextlib

import pytest
import redis
from django.db import connections, transaction
from django.test import override_settings
from rq.job import Job as RQJob
from rq.serializers import JSONSerializer

from django_jobs.client import outbox
from django_jobs.client.backends.redis import push
from django_jobs.exceptions import ConfigurationError, TransactionAmbiguous
from django_jobs.models import OutboxEntry
from django_jobs.store import Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.chaos import DOWN
from tests.testapp import jobs
from tests.testapp.models import SideEffect


def queued(redis_db, queue="default"):
    return [i.decode() for i in redis_db.lrange(f"rq:queue:{queue}", 0, -1)]


# The relay visits every database the outbox can live in.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


@pytest.mark.usefixtures("fast")
def test_outside_a_transaction_the_job_is_pushed_at_once_without_an_outbox_row(redis_db):
    handle = jobs.record.enqueue("now")
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.count() == 0


def test_rq_reads_our_job_hash(redis_db):
    handle = jobs.record.enqueue("compat")
    rq_job = RQJob.fetch(handle.id, connection=redis_db, serializer=JSONSerializer)
    assert rq_job.func_name == "tests.record"
    assert rq_job.args == ["compat"]
    assert rq_job.get_status() == "queued"
    assert rq_job.origin == "default"


def test_inside_a_transaction_the_job_waits_for_commit(redis_db):
    with transaction.atomic():
        handle = jobs.record.enqueue("later")
        assert queued(redis_db) == []
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.filter(pk=handle.id).exists()


def test_rollback_never_enqueues(redis_db):
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.record.enqueue("never")
        raise RuntimeError
    assert queued(redis_db) == []
    assert OutboxEntry.objects.count() == 0


@pytest.mark.parametrize("enqueue_first", [True, False], ids=["outer-first", "savepoint-first"])
def test_rolled_back_savepoint_drops_its_jobs_but_not_the_outer_ones(redis_db, enqueue_first):
    # savepoint-first: the first on-commit callback is the one the rollback drops
    keys = ["kept", "kept-later"] if enqueue_first else ["kept-later"]
    with transaction.atomic():
        kept = [jobs.record.enqueue("kept")] if enqueue_first else []
        try:
            with transaction.atomic():
                jobs.record.enqueue("dropped")
                raise RuntimeError
        except RuntimeError:
            pass
        kept.append(jobs.record.enqueue("kept-later"))
    assert queued(redis_db) == [h.id for h in kept]
    assert set(OutboxEntry.objects.values_list("pk", flat=True)) == {h.id for h in kept}
    run_jobs()
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == keys


@pytest.mark.usefixtures("fast")
def test_autocommit_off_commit_delivers_through_the_relay(redis_db):
    transaction.set_autocommit(False)
    try:
        handle = jobs.record.enqueue("manual")
        assert queued(redis_db) == []
        transaction.commit()
    finally:
        transaction.set_autocommit(True)
    OutboxEntry.objects.update(created_at=OutboxEntry.objects.get().created_at.replace(year=2000))
    Maintenance(Store(redis_db), ["default"], 0.1).relay.run()
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.count() == 0


def test_autocommit_off_rollback_never_enqueues(redis_db):
    transaction.set_autocommit(False)
    try:
        jobs.record.enqueue("manual")
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert OutboxEntry.objects.count() == 0
    Maintenance(Store(redis_db), ["default"], 0.1).relay.run()
    assert queued(redis_db) == []


def test_using_waits_for_the_named_alias(redis_db):
    with transaction.atomic(using="other"):
        handle = jobs.record.using("other").enqueue("other-db")
        assert queued(redis_db) == []
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.using("other").filter(pk=handle.id).exists()
    assert not OutboxEntry.objects.filter(pk=handle.id).exists()


def test_implicit_alias_is_found_when_only_one_is_in_a_transaction(redis_db):
    connections["default"].ensure_connection()
    with transaction.atomic(using="other"):
        handle = jobs.record.enqueue("other-db")
        assert queued(redis_db) == []
    assert queued(redis_db) == [handle.id]


def test_two_aliases_in_a_transaction_without_using_raises(redis_db):
    with transaction.atomic(using="other"), transaction.atomic(), pytest.raises(TransactionAmbiguous):
        jobs.record.enqueue("ambiguous")
    assert queued(redis_db) == []


def test_enqueue_many_pushes_in_one_round_trip(private_redis):
    # A private server: command counts are server-wide, and other test runs may share the main one.
    server = redis.Redis.from_url(private_redis.url)
    warm = jobs.record.enqueue("warm")  # loads the push script into the fresh server
    before = server.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    handles = jobs.record.enqueue_many([(f"k{i}",) for i in range(300)] + [{"key": "kw"}])
    after = server.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert queued(server) == [warm.id] + [h.id for h in handles]
    assert after - before == 1
    run_jobs()
    assert SideEffect.objects.filter(key="kw").exists()


def test_ten_thousand_jobs_in_one_transaction_reach_redis_in_one_flush(redis_db):
    with transaction.atomic():
        for i in range(2000):
            jobs.record.enqueue(f"bulk{i}")
    assert redis_db.llen("rq:queue:default") == 2000


def test_unknown_queue_fails_at_enqueue_not_import(redis_db):
    with override_settings(RQ_QUEUES={"emails": DOWN}), pytest.raises(ConfigurationError, match="default"):
        jobs.record.enqueue("x")


@pytest.mark.usefixtures("fast")
def test_redis_down_outside_a_transaction_stores_the_job_in_the_outbox(redis_db, caplog):
    with override_settings(RQ_QUEUES={"default": DOWN}):
        handle = jobs.record.enqueue("saved")
    assert OutboxEntry.objects.filter(pk=handle.id).exists()
    assert "outbox" in caplog.text
    OutboxEntry.objects.update(created_at=OutboxEntry.objects.get().created_at.replace(year=2000))
    Maintenance(Store(redis_db), ["default"], 0.1).relay.run()
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.count() == 0


@pytest.mark.usefixtures("fast")
def test_redis_down_at_commit_keeps_the_request_alive_and_the_relay_delivers_once(redis_db):
    with override_settings(RQ_QUEUES={"default": DOWN}), transaction.atomic():
        handles = [jobs.record.enqueue(f"k{i}") for i in range(5)]
    assert OutboxEntry.objects.count() == 5
    OutboxEntry.objects.update(created_at=OutboxEntry.objects.first().created_at.replace(year=2000))
    maintenance = Maintenance(Store(redis_db), ["default"], 0.1)
    maintenance.relay.run()
    assert queued(redis_db) == [h.id for h in handles]
    run_jobs()
    assert SideEffect.objects.count() == 5


def test_a_second_push_of_the_same_job_is_a_no_op(redis_db):
    handle = jobs.record.enqueue("once")
    row = OutboxEntry(
        id=handle.id,
        job_name="tests.record",
        queue="default",
        data='["tests.record",null,["once"],{}]',
        timeout=10,
    )
    assert push([outbox.envelope(row)]).seen == {handle.id}
    assert queued(redis_db) == [handle.id]
    run_jobs()
    assert push([outbox.envelope(row)]).seen == {handle.id}  # the finished job's hash still guards it
    assert run_jobs() == 0
    assert SideEffect.objects.count() == 1


def test_web_side_connections_have_short_timeouts():
    from django_jobs.core.connections import get_connection

    with override_settings(JOBS={"REDIS_SOCKET_TIMEOUT": 0.7}):
        kwargs = get_connection("default").connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.7
    assert kwargs["socket_connect_timeout"] == 0.7


def test_enqueue_in_schedules_and_maintenance_promotes_when_due(redis_db):
    handle = jobs.record.enqueue_in(0.2, "delayed")
    assert queued(redis_db) == []
    assert redis_db.zscore("rq:scheduled:default", handle.id) is not None
    store = Store(redis_db)
    assert store.maintain(["default"]) == (0, 0, 0)
    import time

    time.sleep(0.25)
    assert store.maintain(["default"]) == (0, 1, 0)
    assert queued(redis_db) == [handle.id]


@pytest.mark.parametrize("in_transaction", [False, True], ids=["now", "after commit"])
def test_a_job_can_be_sent_to_another_queue_than_its_own(redis_db, in_transaction):
    with transaction.atomic() if in_transaction else contextlib.nullcontext():
        handle = jobs.record.options(queue="emails").enqueue("elsewhere")
    assert handle.queue == "emails"
    assert queued(redis_db, "emails") == [handle.id] and queued(redis_db) == []
    run_jobs(["emails"])
    assert SideEffect.objects.filter(key="elsewhere").count() == 1


def test_an_unknown_queue_for_one_enqueue_is_a_clear_error(redis_db):
    with pytest.raises(ConfigurationError, match=r"Queue 'nowhere' is not in settings\.RQ_QUEUES"):
        jobs.record.options(queue="nowhere").enqueue("x")
