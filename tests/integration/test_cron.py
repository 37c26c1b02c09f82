"""Periodic jobs: each period fires once, whatever the number of schedulers or a lost Redis lock."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging

import pytest
from django.db import connection
from django.test import override_settings

from django_jobs import job
from django_jobs.models import CronRun
from django_jobs.testing import run_jobs
from django_jobs.workflows.cron import Scheduler, overdue, schedules
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.UTC
EVERY_MINUTE = {"tests.tick": "* * * * *", "tests.hourly": None}


def at(minute: int, second: int = 0) -> dt.datetime:
    return dt.datetime(2026, 11, 29, 10, minute, second, tzinfo=UTC)


@override_settings(JOBS={"CRON": EVERY_MINUTE})
def test_a_period_fires_once_however_many_schedulers_tick(redis_db):
    schedulers = [Scheduler(redis_db) for _ in range(4)]
    fired = sum(s.tick(at(0, 5)) for s in schedulers) + sum(s.tick(at(0, 30)) for s in schedulers)
    assert fired == 1
    assert sum(s.tick(at(1, 1)) for s in schedulers) == 1
    assert list(
        CronRun.objects.filter(name="tests.tick")
        .values_list("scheduled_for", flat=True)
        .order_by("scheduled_for")
    ) == [at(0), at(1)]


@override_settings(JOBS={"CRON": EVERY_MINUTE})
def test_the_database_row_guards_the_period_when_the_redis_lock_is_lost(redis_db):
    assert Scheduler(redis_db).tick(at(0, 5)) == 1
    redis_db.flushdb()  # a failover that lost the lock (and the queued job)
    assert Scheduler(redis_db).tick(at(0, 6)) == 0
    assert CronRun.objects.count() == 1


@override_settings(JOBS={"CRON": EVERY_MINUTE})
def test_the_run_is_a_real_job_and_marks_its_period_finished(redis_db):
    Scheduler(redis_db).tick(dt.datetime.now(UTC))
    assert overdue(dt.datetime.now(UTC) + dt.timedelta(minutes=2)) == 1
    run_jobs()
    assert SideEffect.objects.filter(key="tick").count() == 1
    run = CronRun.objects.get()
    assert run.finished_at is not None and run.job_id
    assert overdue(dt.datetime.now(UTC) + dt.timedelta(minutes=2)) == 0


def test_catch_up_once_runs_a_missed_period_late_and_skip_does_not(redis_db):
    late = dt.datetime(2026, 11, 29, 10, 40, tzinfo=UTC)  # the 10:00 period started 40 minutes ago
    with override_settings(JOBS={"CRON": {"tests.tick": "0 * * * *"}}):  # both hourly now
        assert Scheduler(redis_db).tick(late) == 1
    # tests.hourly (catch_up "once") ran late; tests.tick (catch_up "skip") did not
    assert list(CronRun.objects.values_list("name", flat=True)) == ["tests.hourly"]


def test_settings_reschedule_and_disable():
    with override_settings(JOBS={}):
        assert {s.job.name: s.expression for s in schedules()} == {"tests.hourly": "0 * * * *"}
    with override_settings(JOBS={"CRON": {"tests.hourly": None, "tests.tick": "*/5 * * * *"}}):
        assert {s.job.name: s.expression for s in schedules()} == {"tests.tick": "*/5 * * * *"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "every day"}, "not a valid cron"),
        ({"cron": "* * * * *", "cron_catch_up": "always"}, "cron_catch_up"),
    ],
)
def test_bad_schedules_fail_at_decoration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        job(timeout=1, name="tests.bad_cron", **kwargs)(lambda: None)


def test_a_periodic_job_must_take_no_arguments():
    with pytest.raises(ValueError, match="no arguments"):
        job(timeout=1, name="tests.bad_cron_args", cron="* * * * *")(lambda order_id: None)


@contextlib.contextmanager
def cron_runs_refused():
    """The database refuses to record a period (a trigger raises), as an outage mid-fire would."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION djjobs_refuse() RETURNS trigger"
                " AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$ LANGUAGE plpgsql"
            )
            cursor.execute(
                "CREATE TRIGGER djjobs_refuse BEFORE INSERT ON django_jobs_cronrun"
                " FOR EACH ROW EXECUTE FUNCTION djjobs_refuse()"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER djjobs_refuse BEFORE INSERT ON django_jobs_cronrun"
                " BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("DROP TRIGGER djjobs_refuse ON django_jobs_cronrun")
                cursor.execute("DROP FUNCTION djjobs_refuse()")
            else:
                cursor.execute("DROP TRIGGER djjobs_refuse")


@pytest.mark.parametrize("later", ["same scheduler", "another scheduler"])
@override_settings(JOBS={"CRON": EVERY_MINUTE})
def test_a_period_whose_database_write_failed_fires_on_a_later_tick(redis_db, caplog, later):
    scheduler = Scheduler(redis_db)
    scheduler.RETRY_SECONDS = 0
    with cron_runs_refused(), caplog.at_level(logging.ERROR, logger="django_jobs.cron"):
        assert scheduler.tick(at(0, 5)) == 0
    assert "Could not fire tests.tick" in caplog.text  # never silent
    assert not CronRun.objects.exists() and not redis_db.llen("rq:queue:default")
    again = scheduler if later == "same scheduler" else Scheduler(redis_db)
    assert again.tick(at(0, 6)) == 1
    assert list(CronRun.objects.values_list("scheduled_for", flat=True)) == [at(0)]
    assert scheduler.tick(at(0, 7)) + Scheduler(redis_db).tick(at(0, 8)) == 0  # still once per period
