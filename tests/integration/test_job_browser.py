"""The job browser's read side and ``manage.py jobs list / show``: jobs by queue and state, in the
order a worker takes them, a page of one structure at a time."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.forms.models import model_to_dict
from django.utils import timezone

import django_jobs
from django_jobs.core import registry
from django_jobs.models import JobHistory
from django_jobs.ops import browse as jobs_browse
from django_jobs.store import Store, browse
from django_jobs.store.browse import Listing
from django_jobs.store.lifecycle import State
from django_jobs.telemetry import history
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def listed(*args: str) -> list[dict[str, str]]:
    out = io.StringIO()
    call_command("jobs", "list", "--json", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def claim(store: Store, nonce: str, paused: tuple[str, ...] = ()) -> object:
    return store.complete_and_claim(
        ["default"], finished=None, worker_name="host.1", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(paused),
    ).claimed  # fmt: skip


def test_ready_jobs_are_listed_in_the_order_a_worker_takes_them(redis_db):
    low = jobs.record.options(priority=-5).enqueue("low").id
    plain = [jobs.record.enqueue(f"p{n}").id for n in range(3)]
    high = jobs.record.options(priority=9).enqueue("high").id
    higher_first = jobs.record.options(priority=3).enqueue("mid").id
    rows = listed("--state", "waiting", "--state", "waiting_priority")
    assert [row["id"] for row in rows] == [high, higher_first, *plain, low]
    assert {row["state"] for row in rows} == {"waiting", "waiting_priority"}
    assert all(row["name"] == "tests.record" and row["queue"] == "default" for row in rows)


def test_a_page_reads_one_slice_across_the_ready_structures(redis_db):
    high = [jobs.record.options(priority=1).enqueue(f"h{n}").id for n in range(3)]
    plain = [jobs.record.enqueue(f"p{n}").id for n in range(1000)]
    low = [jobs.record.options(priority=-1).enqueue(f"l{n}").id for n in range(3)]
    everything = high + plain + low
    for start, count in ((0, 5), (2, 4), (998, 10), (1004, 50), (5000, 10)):
        page = browse.page(Store.of(redis_db), "default", Listing.READY, start, count)
        assert [where.id for where in page.jobs] == everything[start : start + count]
        assert page.total == 1006


def test_each_listed_state_is_found_by_its_name(redis_db):
    store = Store.of(redis_db)
    scheduled = jobs.record.options(delay=600).enqueue("later").id
    running = jobs.record.enqueue("running").id
    assert claim(store, "n1") is not None
    first = jobs.per_account.enqueue("A", "first").id
    assert claim(store, "n2") is not None
    in_line = jobs.per_account.enqueue("A", "second").id
    assert claim(store, "n3") is None
    dead = jobs.permanent.enqueue("dead").id
    run_jobs()
    expected = {"scheduled": [scheduled], "running": [running, first], "in_line": [in_line], "dead": [dead]}
    for state, ids in expected.items():
        assert sorted(row["id"] for row in listed("--state", state)) == sorted(ids), state
    everything = listed()
    assert {row["id"]: row["state"] for row in everything}[in_line] == "in_line"
    assert {scheduled, running, in_line, dead} <= {row["id"] for row in everything}


def test_held_and_parked_jobs_say_who_paused_what(redis_db):
    store = Store.of(redis_db)
    store.pause("job", "tests.record", by="ada", reason="")
    parked = jobs.record.enqueue("parked").id
    assert claim(store, "n", paused=("tests.record",)) is None
    store.pause("queue", "default", by="bob", reason="")
    held = jobs.greet.enqueue("held").id
    (row,) = listed("--state", "held")
    assert row["id"] == held and row["detail"] == "queue default paused by bob"
    (row,) = listed("--state", "parked")
    assert row["id"] == parked and row["detail"] == "job tests.record paused by ada"


def test_name_and_queue_filters_and_the_limit(redis_db):
    jobs.record.enqueue("a")
    greet = jobs.greet.enqueue("b").id
    emails = jobs.record.options(queue="emails").enqueue("c").id
    assert [row["id"] for row in listed("--name", "tests.greet")] == [greet]
    assert [row["id"] for row in listed("--queue", "emails")] == [emails]
    assert len(listed("--limit", "2")) == 2


def test_a_look_is_bounded_and_says_how_far_it_went(redis_db):
    for n in range(30):
        jobs.record.enqueue(f"r{n}")
    query = jobs_browse.Query("tests.greet")
    found = jobs_browse.jobs(["default"], frozenset({State.WAITING}), query, limit=5, look=10)
    assert found.rows == [] and found.looked == 10 and not found.complete
    out, err = io.StringIO(), io.StringIO()
    call_command("jobs", "list", "--name", "tests.greet", "--look", "10", stdout=out, stderr=err)
    assert out.getvalue() == "ID  NAME  QUEUE  STATE  DETAIL\n"
    assert err.getvalue() == "(read 10 members: more may match; raise --limit or --look)\n"


def test_an_argument_value_finds_jobs_in_redis_in_the_history_and_in_the_dead_letters(redis_db):
    dead = jobs.permanent.enqueue("17").id
    done = jobs.record.enqueue("17").id
    run_jobs()
    waiting = jobs.per_account.enqueue("17", "w").id
    keyword = jobs.greet.enqueue("x", greeting="17").id
    jobs.per_account.enqueue("170", "not this one")
    scheduled = jobs.record.options(delay=600).enqueue("17").id
    assert {row["id"] for row in listed("--arg", "17")} == {waiting, keyword, scheduled, dead, done}
    assert JobHistory.objects.get(job_id=done).state == "finished"
    found = jobs_browse.jobs(["default"], frozenset(State), jobs_browse.Query(argument="17"))
    assert {row.id for row in found.rows} == {waiting, keyword, scheduled, dead, done}
    assert found.complete
    by_name = jobs_browse.jobs(["default"], frozenset(State), jobs_browse.Query("tests.record", "17"))
    assert {row.id for row in by_name.rows} == {scheduled, done}


def test_the_table_has_headers_and_one_line_per_job(redis_db):
    job_id = jobs.record.options(priority=5).enqueue("x").id
    out = io.StringIO()
    call_command("jobs", "list", stdout=out)
    header, line = out.getvalue().splitlines()
    assert header.split() == ["ID", "NAME", "QUEUE", "STATE", "DETAIL"]
    assert line.split() == [job_id, "tests.record", "default", "waiting_priority", "priority", "5"]


def test_ended_jobs_are_listed_from_the_history_newest_first(redis_db):
    first = jobs.record.enqueue("a").id
    run_jobs()
    second = jobs.record.enqueue("b").id
    cancelled = jobs.record.enqueue("c")
    cancelled.cancel()
    run_jobs()
    rows = listed("--state", "finished")
    assert [row["id"] for row in rows] == [second, first]
    assert [row["id"] for row in listed("--state", "cancelled")] == [cancelled.id]
    assert rows[0]["detail"].startswith("ended 20") and ", attempt 1, ran 0.0" in rows[0]["detail"]
    redis_db.flushdb()  # past FINISHED_TTL: the history still has them
    assert [row["id"] for row in listed("--state", "finished")] == [second, first]
    assert django_jobs.why(first).startswith("finished at ")
    assert django_jobs.why(first).endswith("after 1 attempt: it ran to success")


def test_the_history_can_be_off(redis_db, settings):
    job_id = jobs.record.enqueue("a").id
    run_jobs()
    assert JobHistory.objects.filter(job_id=job_id).count() == 1
    settings.JOBS = {**settings.JOBS, "HISTORY": False}
    off = jobs.record.enqueue("b").id
    run_jobs()
    assert not JobHistory.objects.filter(job_id=off).exists()


def test_runjobs_writes_the_history_of_the_jobs_it_ends(redis_db, runjobs):
    runjobs("default", "--concurrency", "2")
    ids = [jobs.record.enqueue(f"r{n}").id for n in range(20)]
    wait_for(lambda: JobHistory.objects.filter(job_id__in=ids, state="finished").count() == 20)


def test_a_row_the_database_refuses_is_dropped_without_holding_back_the_others(redis_db):
    job_id = jobs.record.enqueue("a").id
    run_jobs()
    good = model_to_dict(JobHistory.objects.get(job_id=job_id), exclude=["id"])
    JobHistory.objects.all().delete()
    with transaction.atomic():  # a caller's transaction (a test's, run_jobs in it) stays usable
        history.keep({**good, "job_id": "refused", "ended_at": None})  # NOT NULL
        history.keep(good)
        history.flush(every=0)
        assert list(JobHistory.objects.values_list("job_id", flat=True)) == [job_id]
    history.flush(every=0)  # nothing left to retry
    assert JobHistory.objects.count() == 1


def test_the_history_keeps_what_a_job_did(redis_db):
    dead = jobs.permanent.enqueue("d").id
    run_jobs()
    row = JobHistory.objects.get(job_id=dead)
    assert (row.job_name, row.queue, row.state, row.attempts) == ("tests.permanent", "default", "dead", 1)
    assert row.errors[0]["exception"] == "django_jobs.exceptions.PermanentError"
    assert row.duration is not None and row.enqueued_at <= row.ended_at
    assert json.loads(row.data)[2] == ["d"] and row.worker == "django_jobs.testing"


def test_maintenance_prunes_the_history_past_its_retention_in_batches(redis_db, settings):
    for n in range(5):
        jobs.record.enqueue(f"r{n}")
    run_jobs()
    JobHistory.objects.update(ended_at=timezone.now() - dt.timedelta(days=4))
    kept = jobs.record.enqueue("fresh").id
    run_jobs()
    assert history.prune(batch=2) == 5
    assert list(JobHistory.objects.values_list("job_id", flat=True)) == [kept]


def test_show_prints_the_job_and_why(redis_db):
    job_id = jobs.permanent.enqueue("x").id
    run_jobs()
    out = io.StringIO()
    call_command("jobs", "show", job_id, stdout=out)
    lines = dict(line.split(None, 1) for line in out.getvalue().splitlines() if not line.startswith("error"))
    assert lines["id"] == job_id and lines["name"] == "tests.permanent" and lines["state"] == "dead"
    assert lines["why"].startswith("dead-lettered at ")
    assert "\nerror        attempt 1: django_jobs.exceptions.PermanentError: " in out.getvalue()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["list", "--state", "nope"], "unknown state 'nope'"),
        (["list", "--state", "replaced"], "replaced jobs are not listed: look one up by id"),
        (["list", "--queue", "nope"], "unknown queue 'nope'"),
        (["list", "--limit", "0"], "0 is out of range"),
        (["show", "not an id"], "not a job id"),
        (["show", "nosuchjob"], "No job nosuchjob"),
        (["why", "nosuchjob"], "No job nosuchjob is known"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_and_unknown_ids_are_one_line_errors(arguments, says, redis_db):
    with pytest.raises(CommandError, match=says) as caught:
        call_command("jobs", *arguments)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="the text SQLite's adapter writes")
def test_a_times_utc_text_is_what_the_sqlite_adapter_writes():
    assert history._stores_utc_text(connection)
    now = timezone.now()
    for value in (now, now.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30))), None):
        assert history._utc_text(value) == connection.ops.adapt_datetimefield_value(value)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's synchronous_commit")
def test_a_flush_inside_a_callers_transaction_leaves_its_commit_synchronous(redis_db):
    job_id = jobs.record.enqueue("a").id
    run_jobs()
    row = model_to_dict(JobHistory.objects.get(job_id=job_id), exclude=["id"])
    with transaction.atomic(), connection.cursor() as cursor:
        history.keep({**row, "job_id": "inside"})
        history.flush(every=0)
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"  # the caller's data is as durable as it was
    assert JobHistory.objects.filter(job_id="inside").exists()
