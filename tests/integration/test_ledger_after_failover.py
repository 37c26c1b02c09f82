"""The ledger through a failover, against a real Redis and database: a job whose code returned has
its row deleted by its supervisor at once, from the report alone, and for a while after Redis failed
over (or came back) a job pushed with its row whose row is gone is ended without running again."""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from collections.abc import Iterator

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_jobs import get_job
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import Store, keys, rq_timestamp
from django_jobs.store.lifecycle import F
from django_jobs.worker import build_supervisor
from django_jobs.worker.process import Served, WorkProcess
from django_jobs.worker.protocol import Mark, Started, encode
from django_jobs.worker.rerun import Window
from django_jobs.worker.slot import Slot
from tests.chaos import RedisServer
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


@pytest.fixture
def ledger(settings):
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "ledger"}


@pytest.fixture
def window() -> Window:
    """The window a failover opens: open."""
    opened = Window()
    opened.open()
    return opened


@pytest.fixture
def reports() -> Iterator[int]:
    """The write end of a pipe standing for the supervisor's (nothing reads it: a few reports fit)."""
    read_fd, write_fd = os.pipe()
    yield write_fd
    os.close(read_fd)
    os.close(write_fd)


def drain(reports: int, window: Window, *, count: str = "") -> int:
    """A work process in burst mode, forked as runjobs forks it (its signal handlers stay its own):
    it claims and runs until nothing is left. Returns its exit code or, with ``count``, how many of
    its queries named that table."""
    servers = build_supervisor(["default"]).servers
    connections.close_all()  # the child opens its own
    pid = os.fork()
    if pid == 0:
        code = 100
        try:
            process = WorkProcess(servers, "host.1", reports, burst=True, burst_wait=0, window=window)
            with CaptureQueriesContext(connection) as queries:
                code = process.run()
            if count:
                code = min(sum(count in query["sql"] for query in queries.captured_queries), 99)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def enqueued_before(redis_db, seconds: float = 5) -> str:
    """A ledger job enqueued ``seconds`` ago, as one waiting since before a failover."""
    handle = jobs.record.enqueue("a")
    then = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    redis_db.hset(keys.job_key(handle.id), F.CREATED_AT, rq_timestamp(then))
    return handle.id


def ran_before(job_id: str) -> None:
    """What the supervisor did once this job's code returned on the old primary: its row is gone."""
    OutboxEntry.objects.filter(pk=job_id).delete()


def dead_letter(job_id: str) -> None:
    DeadLetter.objects.create(
        job_id=job_id, job_name="tests.record", queue="default", reason=DeadLetter.Reason.PERMANENT,
        exception="django_jobs.exceptions.PermanentError", message="voided", attempts=1,
    )  # fmt: skip


# --- settling what returned ------------------------------------------------------------------------


def supervised(job_id: str, *reports: Mark):
    """A supervisor that has read these reports of an attempt of ``job_id`` from its work process."""
    supervisor = build_supervisor(["default"])
    slot = supervisor.slots[7] = Slot(7, -1, "host.7")
    slot.feed(encode(Started(f"{job_id}:n0", "default", time.monotonic() + 10, 1)))
    slot.feed(b"".join(encode(report) for report in reports))
    supervisor._note_attempts()
    supervisor._settle_ran(time.monotonic())
    return supervisor


def test_a_returned_jobs_row_is_deleted_from_the_report_alone(ledger, redis_db):
    handle = jobs.record.enqueue("a")
    redis_db.delete(keys.job_key(handle.id))  # Redis lost the job: no status read could tell it ran
    supervised(handle.id, Mark.RETURNED)
    assert not OutboxEntry.objects.exists()


def test_a_raised_jobs_row_stays_until_its_status_says_it_ended(ledger, redis_db):
    handle = jobs.record.enqueue("a")  # queued in Redis: a failure that is retried looks the same
    supervisor = supervised(handle.id, Mark.RAISED, Mark.DONE)
    supervisor.shards[0].ledger.settle()
    assert OutboxEntry.objects.filter(pk=handle.id).exists()


def test_a_dead_lettered_jobs_row_is_deleted_from_the_report_and_its_dead_letter(ledger, redis_db):
    handle = jobs.record.enqueue("a")
    redis_db.delete(keys.job_key(handle.id))  # Redis lost the job: no status read could tell it ended
    dead_letter(handle.id)  # what the work process wrote before it reported its attempt done
    supervised(handle.id, Mark.RAISED, Mark.DONE)
    assert not OutboxEntry.objects.exists()


# --- the mark a ledger job's hash carries ------------------------------------------------------------


def marked(redis_db, job_id: str) -> bool:
    return bool(redis_db.hexists(keys.job_key(job_id), F.LEDGER))


def test_only_a_job_pushed_with_its_ledger_row_is_marked(ledger, settings, redis_db):
    from django.db import transaction

    with transaction.atomic():
        inside = jobs.record.enqueue("in")
    outside = jobs.record.enqueue("out")
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "fast"}
    fast = jobs.record.enqueue("fast")
    assert (marked(redis_db, inside.id), marked(redis_db, outside.id), marked(redis_db, fast.id)) == (
        True, True, False,
    )  # fmt: skip


def test_a_job_whose_row_the_database_refused_loses_its_mark(ledger, redis_db, caplog):
    table = connection.ops.quote_name(OutboxEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO djjobs_outbox_away")
    try:
        with caplog.at_level(logging.WARNING, "django_jobs.enqueue"):
            handle = jobs.record.enqueue("a")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE djjobs_outbox_away RENAME TO {table}")
    assert "could not be written" in caplog.text
    assert redis_db.exists(keys.job_key(handle.id)) and not marked(redis_db, handle.id)


# --- a job that already ran, after a failover ---------------------------------------------------------


def test_a_job_whose_row_is_gone_within_the_window_is_finished_without_running(
    ledger, redis_db, window, reports
):
    job_id = enqueued_before(redis_db)
    ran_before(job_id)
    assert drain(reports, window) == 0
    assert not SideEffect.objects.exists()
    assert get_job(job_id).status == "finished"


def test_a_job_ended_because_it_already_ran_is_logged(ledger, redis_db, window, reports, caplog):
    job_id = enqueued_before(redis_db)
    ran_before(job_id)
    (server,) = build_supervisor(["default"]).servers
    process = WorkProcess([server], "host.1", reports, window=window)
    served = [Served.of(server)]
    one, claimed = process._claim(served, False, "n0")
    with caplog.at_level(logging.WARNING, "django_jobs.worker"):
        assert process._ran_before(one, claimed)
    assert "already ran" in caplog.text and job_id in caplog.text


def test_a_dead_lettered_job_brought_back_ends_dying_without_running(ledger, redis_db, window, reports):
    job_id = enqueued_before(redis_db)
    ran_before(job_id)
    dead_letter(job_id)
    assert drain(reports, window) == 0
    assert not SideEffect.objects.exists()
    assert [raw.decode() for raw in Store(redis_db).dying(older_than=0)] == [job_id]  # buried from there
    assert redis_db.hget(keys.job_key(job_id), F.MESSAGE) == b"voided"


@pytest.mark.parametrize("case", ["its row is there", "young", "not marked", "window closed"])
def test_a_job_that_may_not_have_run_runs(ledger, settings, redis_db, window, reports, case):
    if case == "not marked":  # enqueued while its queue was "fast": it never had a row
        settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "fast"}
    job_id = jobs.record.enqueue("a").id if case == "young" else enqueued_before(redis_db)
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "ledger"}
    if case != "its row is there":
        ran_before(job_id)
    assert drain(reports, Window() if case == "window closed" else window) == 0
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["a"]


def test_outside_the_window_a_claim_asks_the_database_nothing(ledger, redis_db, reports):
    enqueued_before(redis_db)
    assert drain(reports, Window(), count=OutboxEntry._meta.db_table) == 0
    assert SideEffect.objects.count() == 1


# --- what opens the window -------------------------------------------------------------------------


def test_the_window_opens_when_a_work_processs_redis_answers_again(private_redis: RedisServer, reports):
    (server,) = build_supervisor(["default"]).servers
    process = WorkProcess([server], "host.1", reports, window=Window())
    served = [Served.of(server, process._answers)]
    private_redis.stop()
    assert process._claim(served, False, "n0") is None  # it fails: set aside
    assert not process.window.is_open()
    private_redis.start()
    served[0].reach.retry_at = 0.0  # the probe is due
    assert served[0].reach.up()
    assert process.window.is_open()


def test_the_window_opens_when_the_supervisor_sees_the_primary_change(ledger, redis_db):
    supervisor = build_supervisor(["default"])
    ledger_of = supervisor.shards[0].ledger
    ledger_of.watch_primary()
    assert not supervisor.window.is_open()  # first sight is no change
    redis_db.hset(keys.PRIMARY, "run_id", "the-old-primary")  # as a promoted replica would hold it
    ledger_of.watch_primary()
    assert supervisor.window.is_open()
