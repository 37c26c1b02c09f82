"""Expiry, in process: a job that has not started by its expiry (``@job(expires=...)``, or per
enqueue through ``options(expires=...)``) is dropped by the claim, never run: status canceled with
``dj_expired``, the outcome ``expired`` counted, logged and signalled, no dead letter. A job that has
started runs whatever its expiry: a retry waiting out its backoff, a job handed back at shutdown and
a snoozed one (both of which gave their attempt back, not their start)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator

import pytest
from django.db import transaction
from django.urls import reverse

from django_jobs import CancelResult, cancel, get_job, job, pause, resume
from django_jobs.client.enqueue import build
from django_jobs.client.outbox import envelope, row
from django_jobs.core.envelope import Options
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.signals import job_expired, job_started
from django_jobs.store import Settled, Status, Store
from django_jobs.testing import capture_jobs, immediate_jobs, run_jobs
from tests.conftest import outcome_count
from tests.integration.dashboard_support import operator
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, object]]]]:
    found: list[tuple[str, dict[str, object]]] = []
    for name, signal in (("expired", job_expired), ("started", job_started)):
        signal.connect(lambda n=name, **kw: found.append((n, kw)), weak=False, dispatch_uid=f"t-{name}")
    yield found
    for name in ("expired", "started"):
        (job_expired if name == "expired" else job_started).disconnect(dispatch_uid=f"t-{name}")


# --- dropped, never run -------------------------------------------------------------------------------


def test_a_job_not_started_by_its_expiry_is_dropped_never_run(redis_db, heard, caplog):
    before = outcome_count("tests.record", "expired")
    late = jobs.record.options(expires=0.1).enqueue("late")
    time.sleep(0.2)
    kept = jobs.record.enqueue("kept")
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        assert run_jobs() == 1  # only the live one ran
    assert (done("late"), done("kept")) == (0, 1)
    state = get_job(late.id)
    assert (state.status, state.expired, state.attempts) == (Status.CANCELED, True, 0)
    assert state.finished_at is not None and state.started_at is None and state.worker_ids == ()
    assert state.expires_at is not None and state.expires_at < state.finished_at
    assert 3500 < redis_db.ttl(f"rq:job:{late.id}") <= 3600  # kept like a finished job
    assert get_job(kept.id).expired is False
    assert outcome_count("tests.record", "expired") == before + 1
    assert [(name, kw["job_id"], kw["attempt"]) for name, kw in heard] == [
        ("expired", late.id, 0),
        ("started", kept.id, 1),
    ]
    assert heard[0][1]["expires_at"] == state.expires_at
    line = next(r for r in caplog.records if "outcome=expired" in r.getMessage())
    assert line.levelno == logging.INFO
    assert f"job=tests.record job_id={late.id} queue=default attempt=0 outcome=expired" in line.getMessage()
    assert not DeadLetter.objects.exists()
    assert cancel(late.id) is CancelResult.ALREADY_ENDED


def test_a_job_that_starts_before_its_expiry_runs(redis_db):
    handle = jobs.reminder.enqueue("on time")  # @job(expires=2)
    expires = float(redis_db.hget(f"rq:job:{handle.id}", "dj_expires"))
    assert 1.5 < expires - time.time() <= 2
    assert run_jobs() == 1
    assert done("on time") == 1 and get_job(handle.id).status is Status.FINISHED


@pytest.mark.parametrize(
    "expires",
    [dt.timedelta(milliseconds=100), dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)],
    ids=["timedelta", "aware datetime already past"],
)
def test_an_enqueue_sets_its_own_expiry_over_the_jobs(redis_db, expires):
    handle = jobs.reminder.options(expires=expires).enqueue("own")  # its own, not the job's 2 s
    time.sleep(0.15)
    assert run_jobs() == 0
    assert get_job(handle.id).expired and done("own") == 0


def test_a_plain_job_carries_no_expiry_field(redis_db):
    handle = jobs.record.enqueue("plain")
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_expires") is None
    assert get_job(handle.id).expires_at is None


def test_bad_expiries_are_refused_where_they_are_given(restore_registry):
    naive = dt.datetime.now() + dt.timedelta(hours=1)  # naive: refused
    for bad in (0, -5, float("nan"), float("inf"), "60", True, dt.timedelta(0), naive):
        with pytest.raises(ValueError, match="expires"):
            jobs.record.options(expires=bad)  # type: ignore[arg-type]
    for bad in (0, -1, "1", dt.datetime.now(dt.UTC)):
        with pytest.raises(ValueError, match="expires is a positive number of seconds"):
            job(name="tests.bad_expiry", timeout=1, expires=bad)(lambda: None)  # type: ignore[arg-type]
    for cap in (0, -1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="max_snoozes must be a positive int"):
            job(name="tests.bad_cap", timeout=1, max_snoozes=cap)(lambda: None)  # type: ignore[arg-type]


# --- started jobs run, whatever gave their attempt back --------------------------------------------------


def test_a_retry_whose_backoff_ends_after_the_expiry_still_runs(redis_db):
    """The job started before its expiry: "not started by then" does not apply to it, and dropping a
    half-done job silently would hide the failure. Its retries, then its dead letter, settle it."""
    handle = jobs.fails_then_succeeds.options(expires=0.2).enqueue("retried", failures=1)
    assert run_jobs() == 1  # attempt 1 fails; its retry waits up to 0.2 s
    time.sleep(0.3)  # past the expiry
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert (state.status, state.attempts, state.expired) == (Status.FINISHED, 2, False)
    assert done("retried") == 1


def test_a_snoozed_job_past_its_expiry_still_runs(redis_db):
    """A snooze gives the attempt back, not the start: the job ran, and it asked to run again."""
    handle = jobs.snoozer.options(expires=0.2).enqueue("snoozed late", times=1, seconds=0.25)
    assert run_jobs() == 1
    time.sleep(0.3)
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert (state.status, state.expired, state.snoozes, state.attempts) == (Status.FINISHED, False, 1, 1)
    assert done("snoozed late") == 1


def test_a_job_handed_back_at_shutdown_past_its_expiry_still_runs(redis_db):
    """A hand-back gives the attempt back (it is 0 again), not the start, which stays the first one."""
    store = Store(redis_db)
    handle = jobs.record.options(expires=0.2).enqueue("handed back")
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n", finished_ttl=60
    )
    assert claimed is not None and claimed.id == handle.id
    first_start = redis_db.hget(f"rq:job:{handle.id}", "dj_first_started")
    assert store.release(claimed.token, claimed.queue, 60) is Settled.DONE
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_attempt") == b"0"
    time.sleep(0.3)
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert (state.status, state.expired, state.attempts) == (Status.FINISHED, False, 1)
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_first_started") == first_start
    assert done("handed back") == 1


# --- the claim ---------------------------------------------------------------------------------------------


def test_an_expired_job_takes_no_rate_window_and_frees_its_unique_key(redis_db):
    stale = jobs.hourly_quota.options(expires=0.1, unique_key="quota").enqueue("stale")  # rate="1/h"
    time.sleep(0.2)
    assert run_jobs() == 0
    fresh = jobs.hourly_quota.options(unique_key="quota").enqueue("fresh")  # the key is free again
    assert run_jobs() == 1  # and the hour's one start is still there for it
    assert (done("stale"), done("fresh")) == (0, 1)
    assert get_job(stale.id).expired and get_job(fresh.id).status is Status.FINISHED


def test_a_long_run_of_expired_jobs_is_dropped_in_batches_and_the_job_behind_runs(redis_db):
    before = outcome_count("tests.record", "expired")
    stale = jobs.record.options(expires=0.1)
    for i in range(45):
        stale.enqueue(f"old{i}")
    time.sleep(0.2)
    jobs.record.enqueue("behind")
    assert run_jobs() == 1
    assert done("behind") == 1 and not SideEffect.objects.filter(key__startswith="old").exists()
    assert outcome_count("tests.record", "expired") == before + 45
    assert redis_db.llen("rq:queue:default") == 0


def test_a_delayed_job_due_after_its_expiry_is_dropped_when_due(redis_db):
    handle = jobs.record.options(delay=0.2, expires=0.1).enqueue("too late")
    time.sleep(0.3)
    assert run_jobs() == 0
    assert get_job(handle.id).expired


def test_an_expired_job_of_a_paused_type_is_dropped_not_parked_and_a_parked_one_expires_when_released(
    redis_db,
):
    assert pause(job=jobs.record) is True
    stale = jobs.record.options(expires=0.1).enqueue("stale")
    parked = jobs.record.options(expires=0.4).enqueue("parked")
    time.sleep(0.15)
    assert run_jobs() == 0
    assert get_job(stale.id).expired and not get_job(stale.id).paused  # dropped, never parked
    assert get_job(parked.id).paused and not get_job(parked.id).expired  # held while its type is paused
    time.sleep(0.3)  # its expiry passes while it is parked
    resume(job=jobs.record)
    assert run_jobs() == 0  # back on its queue, and dropped by the claim that pops it
    assert get_job(parked.id).expired
    assert (done("stale"), done("parked")) == (0, 0)


# --- the outbox keeps it ----------------------------------------------------------------------------------


def test_an_enqueue_inside_a_transaction_keeps_its_expiry_through_the_outbox(redis_db):
    with transaction.atomic():
        handle = jobs.record.options(expires=60).enqueue("atomic")
    assert OutboxEntry.objects.get(pk=handle.id).expires > time.time() + 59  # pruned later, by the relay
    expires = float(redis_db.hget(f"rq:job:{handle.id}", "dj_expires"))
    assert time.time() + 59 < expires <= time.time() + 60


def test_an_outbox_row_round_trips_the_expiry():
    built = build("tests.record", "default", 10, ["k"], {}, Options(expires_in=30))
    assert built.expires > time.time() + 29
    assert envelope(row(built)).expires == built.expires


# --- test modes ---------------------------------------------------------------------------------------------


def test_immediate_mode_runs_at_once_so_nothing_expires():
    with immediate_jobs():
        jobs.record.options(expires=0.001).enqueue("now")
    assert done("now") == 1


def test_capture_mode_records_the_expiry_and_run_skips_what_expired():
    with capture_jobs() as captured:
        jobs.record.options(expires=0.1).enqueue("stale")
        jobs.reminder.enqueue("fresh")
    stale, fresh = captured.jobs
    assert stale.expires_at is not None and fresh.expires_at is not None
    assert 1.5 < (fresh.expires_at - dt.datetime.now(dt.UTC)).total_seconds() <= 2
    time.sleep(0.15)
    assert stale.expired and not fresh.expired
    captured.run()
    assert (done("stale"), done("fresh")) == (0, 1)


def test_the_job_page_says_an_expired_job_expired_and_a_snoozed_one_how_often_it_snoozed(client, redis_db):
    late = jobs.record.options(expires=0.1).enqueue("late")
    snoozed = jobs.snoozer.enqueue("later", times=1, seconds=60)
    time.sleep(0.2)
    assert run_jobs() == 1
    operator(client, "view_deadletter")
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[late.id])).content.decode()
    assert "<tr><th>state</th><td>expired</td></tr>" in page and "<th>expires at</th>" in page
    assert "it had not started by its expiry, so it was dropped unrun" in page
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[snoozed.id])).content.decode()
    assert "<tr><th>snoozes</th><td>1</td></tr>" in page and "<th>due at</th>" in page
