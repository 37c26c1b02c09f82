"""The outbox rows of a transaction are held and written in bulk right before COMMIT.

What users depend on: a committed job is in the outbox (durable) and in Redis; a rolled-back one
is in neither; a failed outbox write fails the commit instead of losing the job; and a big
transaction costs a few INSERTs, not one round trip per job.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_jobs.client import outbox
from django_jobs.client.enqueue import build, deliver
from django_jobs.models import OutboxEntry, PlainOutboxEntry
from tests.testapp import jobs
from tests.testapp.models import SideEffect

HOOKED = ("commit", "savepoint", "savepoint_rollback", "rollback", "close")


def queued(redis_db):
    return [i.decode() for i in redis_db.lrange("rq:queue:default", 0, -1)]


def outbox_queries(captured, verb="INSERT"):
    table = OutboxEntry._meta.db_table
    return [q for q in captured.captured_queries if q["sql"].startswith(verb) and table in q["sql"]]


def assert_unhooked():
    assert not set(HOOKED) & set(vars(connection)), "the connection keeps a wrapper after its transaction"


@pytest.mark.django_db(transaction=True)
class TestInARealTransaction:
    def test_a_big_transaction_writes_its_rows_in_a_few_inserts_and_all_reach_redis(self, redis_db):
        n = outbox.MAX_HELD * 2 + 500
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            handles = [jobs.record.enqueue(f"k{i}") for i in range(n)]
            assert queued(redis_db) == []
        # MAX_HELD rows at a time, each split no further than the database's own bulk batch size (SQLite's
        # limit on variables per statement) for a plain job's columns, so a few INSERTs, never one per job
        fields = [f for f in PlainOutboxEntry._meta.concrete_fields if not f.generated]
        assert len(fields) < len(OutboxEntry._meta.concrete_fields)
        per_insert = connection.ops.bulk_batch_size(fields, [None] * outbox.MAX_HELD)
        assert len(outbox_queries(captured)) == sum(
            -(-rows // per_insert) for rows in (outbox.MAX_HELD, outbox.MAX_HELD, 500)
        )
        assert queued(redis_db) == [h.id for h in handles]
        assert OutboxEntry.objects.count() == n  # durable: the relay would have them all
        assert_unhooked()

    def test_plain_and_other_rows_of_one_transaction_keep_every_column(self, redis_db, monkeypatch):
        monkeypatch.setattr(outbox, "MAX_HELD", 3)  # rows written mid-transaction too, both kinds at once
        with transaction.atomic():
            plain = [jobs.record.enqueue(f"plain{i}").id for i in range(3)]
            urgent = jobs.record.options(priority=7).enqueue("urgent").id
            expiring = jobs.record.options(expires=60).enqueue("expiring").id
        rows = {row.id: row for row in OutboxEntry.objects.all()}
        assert set(rows) == {*plain, urgent, expiring}
        filled = [(r.priority, r.trace, r.expires, r.batch, r.limit_key) for r in (rows[i] for i in plain)]
        assert filled == [(0, "", 0, "", "")] * 3  # by the database
        assert (rows[urgent].priority, rows[expiring].priority) == (7, 0)
        assert rows[expiring].expires > time.time() + 50
        assert queued(redis_db) == [*plain, expiring] and redis_db.zcard("djjobs:prio:default:high") == 1
        assert all(outbox.envelope(row).data for row in rows.values())  # each reads back as an envelope

    def test_the_row_is_written_at_commit_after_the_transactions_other_work(self, redis_db):
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            handle = jobs.record.enqueue("durable")
            SideEffect.objects.create(key="data")
        sqls = [q["sql"] for q in captured.captured_queries]
        side_effect = next(i for i, sql in enumerate(sqls) if SideEffect._meta.db_table in sql)
        assert sqls.index(outbox_queries(captured)[0]["sql"]) > side_effect
        assert OutboxEntry.objects.filter(pk=handle.id).exists()
        assert queued(redis_db) == [handle.id]

    def test_only_a_savepoint_rollback_makes_the_push_check_which_rows_committed(self, redis_db):
        with CaptureQueriesContext(connection) as captured, transaction.atomic():
            handle = jobs.record.enqueue("plain")
        assert not outbox_queries(captured, "SELECT")
        assert queued(redis_db) == [handle.id]

    def test_a_written_row_undone_by_a_savepoint_rollback_is_not_pushed(self, redis_db):
        with transaction.atomic():
            try:
                with transaction.atomic():
                    jobs.record.enqueue("undone")
                    with transaction.atomic():  # this savepoint writes the held row first
                        pass
                    raise RuntimeError
            except RuntimeError:
                pass
            kept = jobs.record.enqueue("kept")
        assert queued(redis_db) == [kept.id]
        assert list(OutboxEntry.objects.values_list("pk", flat=True)) == [kept.id]

    def test_a_manual_savepoint_rollback_drops_the_jobs_enqueued_after_it(self, redis_db):
        with transaction.atomic():
            kept = jobs.record.enqueue("kept")
            sid = transaction.savepoint()
            jobs.record.enqueue("dropped")
            transaction.savepoint_rollback(sid)
        assert queued(redis_db) == [kept.id]
        assert list(OutboxEntry.objects.values_list("pk", flat=True)) == [kept.id]

    def test_rollback_drops_held_rows_and_the_next_transaction_starts_clean(self, redis_db):
        with pytest.raises(RuntimeError), transaction.atomic():
            jobs.record.enqueue("never")
            raise RuntimeError
        assert_unhooked()
        with transaction.atomic():
            handle = jobs.record.enqueue("next")
        assert queued(redis_db) == [handle.id]
        assert list(OutboxEntry.objects.values_list("pk", flat=True)) == [handle.id]

    def test_a_failed_outbox_write_fails_the_commit_and_rolls_the_data_back(self, redis_db):
        taken = build("tests.record", "default", 10, ["x"], {})
        OutboxEntry.objects.create(id=taken.id, job_name="tests.record", queue="default", data="", timeout=10)
        with pytest.raises(IntegrityError), transaction.atomic():
            SideEffect.objects.create(key="data")
            deliver([taken])  # the same id again: the bulk INSERT at commit violates the key
        assert not SideEffect.objects.exists()  # nothing committed without its job
        assert queued(redis_db) == []
        assert_unhooked()
        with transaction.atomic():
            handle = jobs.record.enqueue("after")
        assert queued(redis_db) == [handle.id]


@pytest.mark.django_db
def test_on_commit_callbacks_run_by_a_test_push_the_held_jobs(redis_db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        handle = jobs.record.enqueue("in a test")
    assert queued(redis_db) == [handle.id]
    assert OutboxEntry.objects.filter(pk=handle.id).exists()


@pytest.mark.django_db(transaction=True)
def test_a_finished_threads_connection_is_not_kept_alive(redis_db):
    seen = []

    def request():
        with transaction.atomic():
            seen.append(jobs.record.enqueue("from a thread").id)
        connections["default"].close()
        seen.append(weakref.ref(connections["default"]))

    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
    gc.collect()
    assert queued(redis_db) == [seen[0]]
    assert seen[1]() is None, "the outbox state pins the connection of a thread that has ended"
