"""Cancelling jobs, in process: a waiting job is cancelled at once and never runs; a running one is
asked to stop, and however its attempt then ends it ends cancelled, never retried, never
dead-lettered. A cancel racing a completion has one winner, in either order."""

from __future__ import annotations

import datetime as dt
import io
import logging
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.db import transaction

from django_jobs import CancelResult, JobCancelled, cancel, cancel_requested
from django_jobs.core import registry
from django_jobs.core.execution import settle_failure
from django_jobs.core.outcomes import Outcome
from django_jobs.models import DeadLetter
from django_jobs.signals import job_cancelled, job_failed
from django_jobs.store import LEASES, Beat, Claimed, Finished, Settled, Store, parse_rq_timestamp
from django_jobs.telemetry import stats
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.conftest import outcome_count
from tests.integration.dashboard_support import operator
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # a cancel deletes outbox rows


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def status(redis_db: redis.Redis, job_id: str) -> bytes | None:
    return redis_db.hget(f"rq:job:{job_id}", "status")


def claim(store: Store, nonce: str = "n") -> Claimed | None:
    """Claim the next job of the default queue as a worker would (limits included), holding its lease."""
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(),
    )  # fmt: skip
    return claimed


def claimed_one(store: Store, job_id: str, nonce: str = "n") -> Claimed:
    claimed = claim(store, nonce)
    assert claimed is not None
    assert claimed.id == job_id
    return claimed


@pytest.fixture
def heard() -> Iterator[list[tuple[str, str]]]:
    """The job_cancelled and job_failed signals, as (signal, job id)."""
    found: list[tuple[str, str]] = []
    for name, signal in (("cancelled", job_cancelled), ("failed", job_failed)):
        signal.connect(
            lambda n=name, **kw: found.append((n, kw["job_id"])), weak=False, dispatch_uid=f"t-{name}"
        )
    yield found
    for name, signal in (("cancelled", job_cancelled), ("failed", job_failed)):
        signal.disconnect(dispatch_uid=f"t-{name}")


# --- a waiting job: cancelled at once ---------------------------------------------------------------


def test_a_queued_job_is_cancelled_at_once_and_never_runs(redis_db):
    handle, kept = jobs.record.enqueue("never"), jobs.record.enqueue("kept")
    assert cancel(handle.id) is CancelResult.CANCELLED
    key = f"rq:job:{handle.id}"
    assert status(redis_db, handle.id) == b"canceled"
    ended = parse_rq_timestamp(redis_db.hget(key, "ended_at"))
    assert ended is not None and abs((dt.datetime.now(dt.UTC) - ended).total_seconds()) < 5
    assert 3500 < redis_db.ttl(key) <= 3600  # kept FINISHED_TTL, like a finished job
    assert redis_db.lrange("rq:queue:default", 0, -1) == [kept.id.encode()]
    assert run_jobs() == 1
    assert (done("never"), done("kept")) == (0, 1)


def test_a_delayed_job_is_cancelled_through_its_handle_and_never_runs(redis_db):
    handle = jobs.record.enqueue_in(0.2, "later")
    assert handle.cancel() is CancelResult.CANCELLED
    assert redis_db.zscore("rq:scheduled:default", handle.id) is None
    assert status(redis_db, handle.id) == b"canceled"
    time.sleep(0.3)
    assert run_jobs() == 0
    assert done("later") == 0


def test_a_retry_waiting_out_its_backoff_is_cancelled_and_never_retried(redis_db, heard):
    handle = jobs.fails_then_succeeds.enqueue("flaky", failures=1)
    assert run_jobs() == 1
    assert status(redis_db, handle.id) == b"scheduled"  # its retry waits in the scheduled set
    assert cancel(handle.id) is CancelResult.CANCELLED
    time.sleep(0.3)  # past the backoff (at most 0.2 s)
    assert run_jobs() == 0
    assert (done("attempt:flaky"), done("flaky")) == (1, 0)
    assert status(redis_db, handle.id) == b"canceled"
    assert not DeadLetter.objects.exists()
    assert heard == [("failed", handle.id)]  # the failed attempt; the cancel of a waiting job runs nothing


def test_a_job_deferred_by_its_concurrency_limit_is_cancelled(redis_db):
    store = Store(redis_db)
    first, second = jobs.solo.enqueue("first"), jobs.solo.enqueue("second")
    holding = claimed_one(store, first.id)  # holds solo's only slot
    assert claim(store, "m") is None  # so the second one is deferred to the scheduled set
    assert status(redis_db, second.id) == b"scheduled"
    assert redis_db.zscore("rq:scheduled:default", second.id) is not None
    assert cancel(second.id) is CancelResult.CANCELLED
    assert redis_db.zscore("rq:scheduled:default", second.id) is None
    store.complete(Finished(holding.token, holding.queue), 60)
    time.sleep(0.6)  # past the deferral
    assert run_jobs() == 0
    assert status(redis_db, second.id) == b"canceled"


def test_a_cancelled_job_releases_its_unique_key(redis_db):
    unique = jobs.record.options(unique_key="report:7")
    first = unique.enqueue("u1")
    duplicate = unique.enqueue("dropped")
    assert redis_db.exists(f"rq:job:{duplicate.id}") == 0  # the key is held: a duplicate is dropped
    assert cancel(first.id) is CancelResult.CANCELLED
    again = unique.enqueue("u2")
    assert status(redis_db, again.id) == b"queued"
    run_jobs()
    assert (done("u1"), done("u2")) == (0, 1)


# --- nothing to cancel ------------------------------------------------------------------------------


def test_a_job_that_ended_is_left_as_it_is_and_an_unknown_one_is_not_found(redis_db):
    ok, dead, gone = jobs.record.enqueue("ok"), jobs.permanent.enqueue("dead"), jobs.record.enqueue("gone")
    assert cancel(gone.id) is CancelResult.CANCELLED
    run_jobs()
    for handle, ended in ((ok, b"finished"), (dead, b"failed"), (gone, b"canceled")):
        before = redis_db.hgetall(f"rq:job:{handle.id}")
        assert before[b"status"] == ended
        assert cancel(handle.id) is CancelResult.ALREADY_ENDED
        assert redis_db.hgetall(f"rq:job:{handle.id}") == before
    assert DeadLetter.objects.get().job_id == dead.id  # dead-lettered once, untouched by the cancel
    assert cancel(uuid.uuid4().hex) is CancelResult.NOT_FOUND
    assert cancel(uuid.uuid4().hex, queue="emails") is CancelResult.NOT_FOUND


def test_a_key_that_is_not_a_job_hash_is_not_found(redis_db):
    redis_db.set("rq:job:plain-string", "x")
    assert cancel("plain-string") is CancelResult.NOT_FOUND
    assert redis_db.get("rq:job:plain-string") == b"x"


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, "semi;colon", "é", "a:b"])
def test_a_malformed_id_is_a_value_error(bad):
    with pytest.raises(ValueError, match="is not valid"):
        cancel(bad)


def test_cancel_acts_at_once_inside_a_transaction_not_at_its_commit(redis_db):
    waiting = jobs.record.enqueue("waiting")
    with pytest.raises(RuntimeError), transaction.atomic():
        assert cancel(waiting.id) is CancelResult.CANCELLED
        raise RuntimeError("the transaction rolls back")
    assert status(redis_db, waiting.id) == b"canceled"  # a rollback does not undo a cancel
    with transaction.atomic():
        pending = jobs.record.enqueue("pending")
        assert cancel(pending.id) is CancelResult.NOT_FOUND  # not in Redis before the commit
    assert status(redis_db, pending.id) == b"queued"
    assert cancel(pending.id) is CancelResult.CANCELLED


# --- a running job: asked to stop -------------------------------------------------------------------


def test_a_running_job_is_asked_and_its_heartbeat_reports_the_request(redis_db):
    store = Store(redis_db)
    handle = jobs.record.enqueue("running")
    claimed = claimed_one(store, handle.id)
    assert store.heartbeat([claimed.token], 30).cancelled == set()
    assert cancel(handle.id) is CancelResult.REQUESTED
    requested = redis_db.hget(f"rq:job:{handle.id}", "dj_cancel")
    assert parse_rq_timestamp(requested) is not None
    assert handle.state().cancel_requested_at == parse_rq_timestamp(requested)  # readers see the request
    assert status(redis_db, handle.id) == b"started"  # it runs until it stops or is killed
    assert cancel(handle.id) is CancelResult.REQUESTED  # asking again changes nothing
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_cancel") == requested
    beat = store.heartbeat([claimed.token], 30)
    assert (beat.gone, beat.cancelled) == (set(), {claimed.token})
    redis_db.zrem(LEASES, claimed.token)
    beat = store.heartbeat([claimed.token], 30)
    assert (beat.gone, beat.cancelled) == ({claimed.token}, set())  # a lease gone: nothing to stop


def test_a_running_job_whose_hash_became_garbage_still_has_its_lease_renewed(redis_db):
    store = Store(redis_db)
    handle = jobs.record.enqueue("garbled")
    claimed = claimed_one(store, handle.id)
    redis_db.delete(f"rq:job:{handle.id}")
    redis_db.set(f"rq:job:{handle.id}", "not a hash")  # the cancel check must not fail the heartbeat
    before = redis_db.zscore(LEASES, claimed.token)
    time.sleep(0.01)
    assert store.heartbeat([claimed.token], 30) == Beat(set(), set())
    assert redis_db.zscore(LEASES, claimed.token) > before


def test_a_job_that_stops_as_asked_ends_cancelled_never_retried_nor_dead_lettered(redis_db, heard, caplog):
    handle = jobs.cancels_itself.enqueue("polite")
    before = outcome_count("tests.cancels_itself", "cancelled")
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        assert run_jobs() == 1
    assert done("polite:requested:True") == 1  # cancel() said REQUESTED, cancel_requested() True
    assert status(redis_db, handle.id) == b"canceled"
    assert redis_db.hget(f"rq:job:{handle.id}", "ended_at") is not None
    assert redis_db.zcard("rq:wip:default") == 0 and redis_db.zcard(LEASES) == 0
    time.sleep(0.3)  # past any backoff
    assert run_jobs() == 0
    assert done("attempt:polite") == 1
    assert not DeadLetter.objects.exists() and redis_db.zcard("djjobs:dying") == 0
    assert outcome_count("tests.cancels_itself", "cancelled") == before + 1
    assert heard == [("cancelled", handle.id)]  # job_cancelled, not job_failed
    lines = [r for r in caplog.records if getattr(r, "outcome", None) == "cancelled"]
    assert [(r.levelno, r.job_id) for r in lines] == [(logging.INFO, handle.id)]
    counts: dict[str, stats.JobStats] = {}
    stats.read(redis_db, dt.datetime.now(dt.UTC), counts)
    hour = counts["tests.cancels_itself"].hour
    assert (hour.cancelled, hour.failures, hour.successes) == (1, 0, 0)


def test_a_failure_after_the_cancel_request_ends_cancelled_not_in_a_retry(redis_db, heard):
    handle = jobs.cancels_itself.enqueue("flaky", then="fail")  # a retryable ConnectionError
    assert run_jobs() == 1
    assert status(redis_db, handle.id) == b"canceled"
    time.sleep(0.3)
    assert run_jobs() == 0
    assert done("attempt:flaky") == 1 and not DeadLetter.objects.exists()
    assert heard == [("cancelled", handle.id)]


def test_a_job_that_finishes_despite_the_request_succeeds(redis_db):
    handle = jobs.cancels_itself.enqueue("stubborn", then="finish")
    assert run_jobs() == 1
    assert done("stubborn") == 1
    assert status(redis_db, handle.id) == b"finished"
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_cancel") is not None  # harmless once finished


def test_jobcancelled_raised_unasked_also_ends_cancelled(redis_db):
    handle = jobs.record.enqueue("self")
    store = Store(redis_db)
    ended = settle_failure(store, claimed_one(store, handle.id), JobCancelled("nothing left to do"))
    assert (ended.outcome, ended.bury, ended.retry_in) == (Outcome.CANCELLED, False, None)
    assert status(redis_db, handle.id) == b"canceled"


def test_cancel_requested_is_false_outside_a_job():
    assert cancel_requested() is False


def test_a_lost_attempt_whose_cancel_was_requested_is_cancelled_by_the_reaper(redis_db, heard):
    store = Store(redis_db)
    handle = jobs.record.enqueue("lost")
    claimed = claimed_one(store, handle.id)
    assert cancel(handle.id) is CancelResult.REQUESTED
    redis_db.zadd(LEASES, {claimed.token: 1})  # its worker died: the lease expired long ago
    loop = Maintenance(Store(redis_db), ["default"], 0.1)
    for _ in range(3):
        loop.reaper.run()
    assert status(redis_db, handle.id) == b"canceled"
    assert redis_db.llen("rq:queue:default") == 0 and redis_db.zcard("djjobs:lost") == 0
    assert run_jobs() == 0 and done("lost") == 0
    assert heard == [("cancelled", handle.id)]


def test_a_job_handed_back_at_shutdown_after_its_cancel_request_is_cancelled(redis_db):
    store = Store(redis_db)
    asked, other = jobs.record.enqueue("asked"), jobs.record.enqueue("other")
    claimed = claimed_one(store, asked.id)
    assert cancel(asked.id) is CancelResult.REQUESTED
    assert store.release(claimed.token, claimed.queue, 60) is Settled.CANCELLED
    assert status(redis_db, asked.id) == b"canceled"
    assert redis_db.hget(f"rq:job:{asked.id}", "dj_attempt") == b"1"  # its attempt stays counted
    claimed = claimed_one(store, other.id, "m")
    assert store.release(claimed.token, claimed.queue, 60) is Settled.DONE  # unasked: back in its queue
    assert status(redis_db, other.id) == b"queued"
    assert run_jobs() == 1 and (done("asked"), done("other")) == (0, 1)


# --- the race with a completion: one winner, in either order ----------------------------------------


def test_a_completion_that_lands_first_wins_and_the_cancel_changes_nothing(redis_db):
    store = Store(redis_db)
    handle = jobs.record.enqueue("first")
    claimed = claimed_one(store, handle.id)
    assert store.complete(Finished(claimed.token, claimed.queue), 60)
    assert cancel(handle.id) is CancelResult.ALREADY_ENDED
    assert status(redis_db, handle.id) == b"finished"

    asked = jobs.record.enqueue("asked")
    claimed = claimed_one(store, asked.id, "m")
    assert cancel(asked.id) is CancelResult.REQUESTED
    assert store.complete(Finished(claimed.token, claimed.queue), 60)  # the completion lands first
    late = store.fail(claimed.token, claimed.queue, delay=None, fields={}, finished_ttl=60, cancel=True)
    assert late is Settled.FENCED  # the cancel's settling comes too late
    assert status(redis_db, asked.id) == b"finished"
    assert redis_db.hget(f"rq:job:{asked.id}", "dj_cancel") is not None


def test_a_cancel_settled_first_wins_and_the_late_completion_is_refused(redis_db):
    store = Store(redis_db)
    handle = jobs.record.enqueue("raced")
    claimed = claimed_one(store, handle.id)
    assert cancel(handle.id) is CancelResult.REQUESTED
    settled = store.fail(claimed.token, claimed.queue, delay=None, fields={}, finished_ttl=60, cancel=True)
    assert settled is Settled.CANCELLED
    assert (
        store.complete(Finished(claimed.token, claimed.queue), 60) is False
    )  # fenced off by its lease token
    assert status(redis_db, handle.id) == b"canceled"
    assert redis_db.zscore(LEASES, claimed.token) is None
    assert redis_db.zscore("rq:wip:default", claimed.token) is None
    assert redis_db.zcard("djjobs:dying") == 0


# --- manage.py jobs_cancel ----------------------------------------------------------------------------


@pytest.fixture
def canceller(client) -> str:
    """An admin user who may cancel jobs; the commands act as them."""
    return operator(client, "cancel_job", username="ops").username


def test_jobs_cancel_says_what_it_did_one_line_per_id(redis_db, canceller):
    store = Store(redis_db)
    running, waiting, ended = jobs.record.enqueue("r"), jobs.record.enqueue("w"), jobs.record.enqueue("e")
    assert cancel(ended.id) is CancelResult.CANCELLED
    claimed_one(store, running.id)
    out = io.StringIO()
    call_command("jobs_cancel", waiting.id, running.id, ended.id, "--user", canceller, stdout=out)
    lines = out.getvalue().splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        [waiting.id, "cancelled"],
        [running.id, "cancel requested"],
        [ended.id, "already ended (finished, failed or cancelled)"],
    ]
    assert "1 s after its worker learns of it" in lines[1]  # the test settings' CANCEL_GRACE


def test_jobs_cancel_exits_1_when_an_id_is_not_found(redis_db, canceller):
    waiting, unknown = jobs.record.enqueue("w"), uuid.uuid4().hex
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^1 of 2 job\(s\) not found$") as raised:
        call_command("jobs_cancel", unknown, waiting.id, "--user", canceller, stdout=out)
    assert raised.value.returncode == 1
    assert out.getvalue().splitlines() == [
        f"{unknown}: not found: no such job in Redis (unknown, not pushed yet, or expired)",
        f"{waiting.id}: cancelled: it was waiting and will not run",
    ]
    assert status(redis_db, waiting.id) == b"canceled"


def test_jobs_cancel_writes_each_cancel_to_the_admin_log_under_its_user(redis_db, canceller):
    first, second = jobs.record.enqueue("a"), jobs.record.enqueue("b")
    call_command("jobs_cancel", first.id, second.id, "--user", canceller, stdout=io.StringIO())
    logged = LogEntry.objects.order_by("pk").values_list("user__username", "object_id", "change_message")
    assert list(logged) == [
        ("ops", first.id, "Cancel: cancelled (jobs_cancel)"),
        ("ops", second.id, "Cancel: cancelled (jobs_cancel)"),
    ]


def test_the_audit_user_setting_names_who_acts_without_user_and_a_missing_one_says_how_to_fix_it(
    redis_db, client, settings
):
    waiting = jobs.record.enqueue("w")
    operator(client, "cancel_job", username="deploy-bot")
    settings.JOBS = {**settings.JOBS, "AUDIT_USER": "deploy-bot"}
    call_command("jobs_cancel", waiting.id, stdout=io.StringIO())
    assert LogEntry.objects.get().user.username == "deploy-bot"
    settings.JOBS = {**settings.JOBS, "AUDIT_USER": None}
    with pytest.raises(CommandError, match=r"\(your login name\): every change is audited; pass --user"):
        call_command("jobs_cancel", waiting.id, stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"No admin user 'ghost' \(--user\).*JOBS\['AUDIT_USER'\]"):
        call_command("jobs_cancel", waiting.id, "--user", "ghost", stdout=io.StringIO())
