"""A "ledger" job enqueued outside a transaction: its row's INSERT goes out before the push and is read
after it (PostgreSQL), or is written first (elsewhere). Either way the row and the push are both
done when ``enqueue()`` returns, and a database that fails does not fail a push Redis took."""

from __future__ import annotations

import logging

import pytest
from django.db import DatabaseError, connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_jobs.client import early_rows
from django_jobs.models import OutboxEntry
from django_jobs.store import keys
from tests.chaos import DOWN
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's early INSERT")


@pytest.fixture(autouse=True)
def ledger(settings):
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "ledger"}


def test_the_row_and_the_push_are_both_done_when_enqueue_returns(redis_db):
    handle = jobs.record.options(priority=3).enqueue("a")  # a whole row: a column beyond the plain ones
    plain = jobs.record.enqueue("b")
    rows = {row.pk: row for row in OutboxEntry.objects.all()}
    assert set(rows) == {handle.id, plain.id}
    assert rows[handle.id].priority == 3 and rows[plain.id].priority == 0
    assert rows[plain.id].options == {} and rows[plain.id].job_name == "tests.record"
    assert redis_db.exists(keys.job_key(handle.id), keys.job_key(plain.id)) == 2


def test_many_jobs_outside_a_transaction_each_get_a_row(redis_db):
    handles = jobs.record.enqueue_many([(str(n),) for n in range(1500)])  # more than one bounded INSERT
    assert OutboxEntry.objects.count() == 1500 == len({h.id for h in handles})


@postgres_only
def test_the_statement_commits_asynchronously_and_debug_still_records_it(redis_db):
    with CaptureQueriesContext(connection) as queries:
        jobs.record.enqueue("a")
    sql = [q["sql"] for q in queries.captured_queries]
    assert len(sql) == 1 and sql[0].startswith(early_rows.ASYNC_COMMIT + "INSERT INTO")
    with connection.cursor() as cursor:  # the connection is idle again, in autocommit
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # SET LOCAL ended with its statement's transaction
    assert connection.get_autocommit() and not connection.in_atomic_block


@postgres_only
def test_a_row_the_database_refuses_leaves_the_job_in_redis_and_the_connection_usable(
    redis_db, caplog, monkeypatch
):
    real = early_rows._insert  # a statement the database answers with an error: a table it lacks
    monkeypatch.setattr(early_rows, "_insert", lambda *a: real(*a).replace("INTO", "INTO nowhere_"))
    with caplog.at_level(logging.WARNING, "django_jobs.enqueue"):
        handle = jobs.record.enqueue("a")
    assert "could not be written" in caplog.text and "nowhere_" in caplog.text
    assert redis_db.exists(keys.job_key(handle.id))  # Redis took it: the enqueue succeeded
    assert not OutboxEntry.objects.exists()  # and the connection answers the next query


def _end_our_database_session() -> None:
    """What a database restart does to this process's connection: another session terminates it."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    other = connection.copy()
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()


@postgres_only
def test_a_lost_database_connection_does_not_fail_a_push_redis_took(redis_db, caplog):
    _end_our_database_session()
    with caplog.at_level(logging.WARNING, "django_jobs.enqueue"):
        handle = jobs.record.enqueue("a")
    assert "could not be written" in caplog.text
    assert redis_db.exists(keys.job_key(handle.id))
    connection.close()  # Django drops the broken connection; the next query reconnects
    assert not OutboxEntry.objects.exists()


@postgres_only
def test_when_the_database_and_redis_both_fail_the_enqueue_raises(redis_db):
    _end_our_database_session()
    with override_settings(RQ_QUEUES={"default": DOWN}), pytest.raises(DatabaseError):
        jobs.record.enqueue("a")
    connection.close()
    assert not OutboxEntry.objects.exists() and not redis_db.keys("rq:job:*")


@postgres_only
def test_a_push_that_raises_still_reads_the_rows_answer_so_the_connection_stays_usable(redis_db, monkeypatch):
    from django_jobs.store import Store

    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the push")

    monkeypatch.setattr(Store, "push", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        jobs.record.enqueue("a")
    assert OutboxEntry.objects.count() == 1  # the row's answer was read: the next query works
