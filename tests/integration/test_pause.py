"""Pausing, in process: a paused queue keeps its jobs and no claim takes them; a paused job type's jobs
are parked as claims pop them (in order, without an attempt) and go back to the head of their queue
on resume. The state is in Redis, a resume that races a claim never strands a job, a cancel finds a
parked job, and bad input is a clear error."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time

import pytest
import redis
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User

from django_jobs import CancelResult, JobDoesNotExist, cancel, get_job, pause, paused, resume
from django_jobs.client.backends.redis import push
from django_jobs.client.enqueue import build
from django_jobs.core import registry
from django_jobs.core.envelope import Options
from django_jobs.exceptions import ConfigurationError, JobNotFound
from django_jobs.flow.pausing import Held, Resumed
from django_jobs.store import Status, Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # a cancel deletes outbox rows

PARKED = "djjobs:paused:default:tests.record"


def done(*keys: str) -> list[str]:
    """The keys of these side effects, in the order the jobs ran."""
    return list(SideEffect.objects.filter(key__in=keys).order_by("pk").values_list("key", flat=True))


def ids(redis_db: redis.Redis, key: str) -> list[str]:
    return [member.decode() for member in redis_db.lrange(key, 0, -1)]


def claim(store: Store, limits: str) -> object:
    return store.complete_and_claim(
        ["default"],
        finished=None,
        worker_name="w",
        lease_seconds=30,
        nonce="n",
        finished_ttl=60,
        limits=limits,
    )[1]


# --- a paused queue ----------------------------------------------------------------------------------


def test_a_paused_queue_keeps_its_jobs_untouched_while_other_queues_run(redis_db):
    assert pause(queue="emails", reason="mail provider down") is True
    waiting = jobs.record.options(queue="emails").enqueue("mail")
    jobs.record.enqueue("other")
    assert run_jobs() == 1
    assert done("mail", "other") == ["other"]
    assert ids(redis_db, "rq:queue:emails") == [waiting.id]  # still where it was, nothing spent
    state = get_job(waiting.id)
    assert (state.status, state.attempts, state.paused) == (Status.QUEUED, 0, True)
    assert resume(queue="emails").was_paused is True
    assert get_job(waiting.id).paused is False
    assert run_jobs() == 1
    assert done("mail") == ["mail"]


def test_a_pause_records_who_when_and_why_once(redis_db, settings):
    user = User.objects.create_user("alice", is_staff=True)
    before = time.time()
    assert pause(queue="emails", reason="deploy", actor=user) is True
    assert pause(queue="emails", reason="something else") is False  # already paused: kept as it was
    (one,) = paused()
    assert (one.kind, one.name, one.by, one.reason) == ("queue", "emails", "alice", "deploy")
    assert one.since is not None and before - 1 < one.since.timestamp() < time.time() + 1
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id, entry.object_repr) == (user, "queue:emails", "Queue emails")
    assert entry.change_message == "Paused: deploy"
    resume(queue="emails", actor=user)
    assert LogEntry.objects.latest("pk").change_message == "Resumed (0 held job(s) back on their queue)."
    assert paused() == []


def test_without_an_actor_the_process_login_and_host_are_recorded(redis_db):
    pause(queue="default")
    (one,) = paused()
    assert "@" in one.by
    assert not LogEntry.objects.exists()


# --- a paused job type -------------------------------------------------------------------------------


def test_a_paused_job_types_jobs_are_parked_in_order_without_an_attempt(redis_db):
    assert pause(job=jobs.record, reason="bad deploy") is True
    first, second = jobs.record.enqueue("first"), jobs.record.enqueue("second")
    jobs.greet.enqueue("between")
    third = jobs.record.enqueue("third")
    assert run_jobs() == 1  # only the other job type ran
    assert done("first", "second", "third") == []
    assert ids(redis_db, PARKED) == [first.id, second.id, third.id]
    for handle in (first, second, third):
        state = get_job(handle.id)
        assert (state.status, state.attempts, state.paused) == (Status.QUEUED, 0, True)
    assert redis_db.llen("rq:queue:default") == 0


def test_on_resume_parked_jobs_go_back_to_the_head_of_their_queue_in_order(redis_db):
    pause(job="tests.record")
    parked = [jobs.record.enqueue(f"parked-{n}").id for n in range(3)]
    run_jobs()
    later = jobs.greet.enqueue("later")  # queued while the type was paused: behind the parked jobs
    assert resume(job="tests.record").released == 3
    assert ids(redis_db, "rq:queue:default") == [*parked, later.id]
    assert not redis_db.exists(PARKED) and not redis_db.exists("djjobs:paused:lists")
    assert run_jobs() == 4
    assert done("parked-0", "parked-1", "parked-2", "hello:later") == [
        "parked-0", "parked-1", "parked-2", "hello:later",
    ]  # fmt: skip
    assert [get_job(job_id).attempts for job_id in parked] == [1, 1, 1]


def test_a_retry_keeps_its_attempt_count_while_parked(redis_db):
    handle = jobs.fails_then_succeeds.enqueue("flaky", failures=1)
    assert run_jobs() == 1  # attempt 1 failed; the retry waits out its backoff
    pause(job=jobs.fails_then_succeeds)
    time.sleep(0.3)  # past the backoff (at most 0.2 s): promoted, then parked by the claim
    assert run_jobs() == 0
    assert get_job(handle.id).attempts == 1
    resume(job=jobs.fails_then_succeeds)
    assert run_jobs() == 1
    state = get_job(handle.id)
    assert (state.status, state.attempts) == (Status.FINISHED, 2)


def test_priorities_are_kept_through_a_pause(redis_db):
    pause(job=jobs.record)
    low = jobs.record.options(priority=-5).enqueue("low")
    plain = jobs.record.enqueue("plain")
    high = [jobs.record.options(priority=5).enqueue(f"high-{n}") for n in range(2)]
    run_jobs()
    assert ids(redis_db, PARKED) == [high[0].id, high[1].id, plain.id, low.id]  # as the claims popped them
    jobs.record.options(priority=5).enqueue("high-later")  # pushed after they were parked: behind them
    resume(job=jobs.record)
    assert run_jobs() == 5
    assert done("low", "plain", "high-0", "high-1", "high-later") == [
        "high-0", "high-1", "high-later", "plain", "low",
    ]  # fmt: skip


def test_a_pause_by_alias_or_current_name_holds_jobs_queued_under_either(redis_db):
    assert pause(job="tests.old_name") is True  # an alias: the pause is the job type's
    assert [(p.kind, p.name) for p in paused()] == [("job", "tests.new_name")]
    definition = registry.get("tests.new_name")
    old = build("tests.old_name", "default", definition.timeout, ["old"], {}, Options())
    push([old])
    new = jobs.renamed.enqueue("new")
    assert run_jobs() == 0
    assert ids(redis_db, "djjobs:paused:default:tests.new_name") == [old.id, new.id]
    resume(job="tests.new_name")
    assert run_jobs() == 2
    assert done("old", "new") == ["old", "new"]


def test_a_parked_job_takes_no_concurrency_slot_or_rate_window(redis_db):
    pause(job=jobs.solo)  # concurrency=1
    pause(job=jobs.hourly_quota)  # rate="1/h"
    jobs.solo.enqueue("solo-1")
    jobs.solo.enqueue("solo-2")
    jobs.hourly_quota.enqueue("quota")
    assert run_jobs() == 0
    assert not redis_db.exists("djjobs:slots:tests.solo")
    assert not list(redis_db.scan_iter(match="djjobs:rate:*"))
    resume(job=jobs.solo)
    resume(job=jobs.hourly_quota)
    assert run_jobs() == 3  # the solo jobs one after the other, and the hour's one start of the quota
    assert SideEffect.objects.filter(key__startswith="solo-").count() == 2 and done("quota") == ["quota"]


def test_a_job_types_jobs_on_another_queue_are_parked_and_released_there(redis_db):
    pause(job=jobs.record)
    mail = jobs.record.options(queue="emails").enqueue("mail")
    run_jobs()
    assert ids(redis_db, "djjobs:paused:emails:tests.record") == [mail.id]
    assert resume(job=jobs.record).released == 1
    assert ids(redis_db, "rq:queue:emails") == [mail.id]


def test_parked_jobs_released_into_a_paused_queue_wait_for_that_queue(redis_db):
    pause(job=jobs.record)
    handle = jobs.record.enqueue("both")
    run_jobs()
    pause(queue="default")
    resume(job=jobs.record)
    assert ids(redis_db, "rq:queue:default") == [handle.id]
    assert run_jobs() == 0
    resume(queue="default")
    assert run_jobs() == 1


def test_thousands_of_parked_jobs_all_go_back_in_order(redis_db):
    pause(job=jobs.record)
    handles = jobs.record.enqueue_many([(f"n{n}",) for n in range(1200)])
    assert run_jobs() == 0  # parks them all, a hundred per claim script
    assert redis_db.llen(PARKED) == 1200
    assert resume(job=jobs.record).released == 1200  # in batches of 500
    assert ids(redis_db, "rq:queue:default") == [handle.id for handle in handles]


# --- races and leftovers ---------------------------------------------------------------------------


def test_a_claim_that_still_believes_the_type_paused_runs_it_after_a_resume(redis_db):
    store = Store.of(redis_db)
    pause(job=jobs.record)
    stale = registry.limits_json(["tests.record"])  # what a worker read before the resume
    resume(job=jobs.record)
    handle = jobs.record.enqueue("raced")
    claimed = claim(store, stale)
    assert claimed is not None and claimed.id == handle.id  # claimed, not parked: nothing strands it
    assert not redis_db.exists(PARKED)


def test_a_claim_that_does_not_know_of_a_pause_yet_runs_the_job(redis_db):
    """The documented window: a work process rereads the pauses once a second."""
    store = Store.of(redis_db)
    handle = jobs.record.enqueue("early")
    pause(job=jobs.record)
    claimed = claim(store, registry.limits_json())
    assert claimed is not None and claimed.id == handle.id


def until_read(held: Held, queues: list[str]) -> str:
    """Ask as a work process's loop does until its claims leave out what the test expects; the limits."""
    deadline = time.monotonic() + 20
    while held.claim()[0] != queues and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.claim()[0] == queues
    return held.claim()[1]


def test_a_work_process_sees_pauses_and_resumes_at_its_next_reading(redis_db, caplog):
    caplog.set_level(logging.INFO, "django_jobs.worker")
    held = Held(Store.of(redis_db), ["default", "emails"])
    assert held.claim()[:2] == (["default", "emails"], registry.limits_json())
    pause(queue="emails", reason="provider down")
    pause(job=jobs.record)
    limits = json.loads(until_read(held, ["default"]))
    assert limits["tests.record"] == [0, 0, 1, "tests.record", False, True]
    assert "Queue emails is paused (by " in caplog.text and ": provider down); its jobs wait" in caplog.text
    resume(queue="emails")
    resume(job=jobs.record)
    assert until_read(held, ["default", "emails"]) == registry.limits_json()
    assert "Queue emails is resumed" in caplog.text and "Job tests.record is resumed" in caplog.text


def test_maintenance_puts_back_jobs_a_resume_left_parked(redis_db):
    pause(job=jobs.record)
    handle = jobs.record.enqueue("stranded")
    run_jobs()
    Store.of(redis_db).resume("job", "tests.record")  # a resume that died before it released them
    assert ids(redis_db, PARKED) == [handle.id]
    Maintenance(Store.of(redis_db), ["default", "emails"], 0.1).parked.run()
    assert ids(redis_db, "rq:queue:default") == [handle.id]
    assert run_jobs() == 1


def test_a_broken_parked_list_never_holds_back_the_others(redis_db, caplog):
    pause(job=jobs.record)
    handle = jobs.record.enqueue("stranded")
    run_jobs()
    Store.of(redis_db).resume("job", "tests.record")  # a resume that died before it released them
    listed = redis_db.smembers("djjobs:paused:lists")
    redis_db.delete("djjobs:paused:lists")
    redis_db.sadd("djjobs:paused:lists", json.dumps(["default", "tests.ghost"]), *listed)  # first
    redis_db.set("djjobs:paused:default:tests.ghost", "not a list")
    Maintenance(Store.of(redis_db), ["default"], 0.1).parked.run()
    assert ids(redis_db, "rq:queue:default") == [handle.id]


def test_maintenance_leaves_the_jobs_of_a_type_still_paused(redis_db):
    pause(job=jobs.record)
    jobs.record.enqueue("held")
    run_jobs()
    Maintenance(Store.of(redis_db), ["default"], 0.1).parked.run()
    assert redis_db.llen(PARKED) == 1


def test_resuming_again_releases_what_an_interrupted_resume_left(redis_db):
    pause(job=jobs.record)
    jobs.record.enqueue("stranded")
    run_jobs()
    Store.of(redis_db).resume("job", "tests.record")
    assert resume(job=jobs.record) == Resumed(was_paused=False, released=1)
    assert redis_db.llen("rq:queue:default") == 1


# --- cancel and read --------------------------------------------------------------------------------


def test_a_parked_job_is_cancelled_and_a_resume_never_brings_it_back(redis_db):
    pause(job=jobs.record)
    doomed, kept = jobs.record.enqueue("doomed"), jobs.record.enqueue("kept")
    run_jobs()
    assert cancel(doomed.id) is CancelResult.CANCELLED
    assert ids(redis_db, PARKED) == [kept.id]
    state = get_job(doomed.id)
    assert (state.status, state.paused) == (Status.CANCELED, False)
    assert resume(job=jobs.record).released == 1
    assert run_jobs() == 1
    assert done("doomed", "kept") == ["kept"]


def test_a_job_parked_under_a_cancel_is_asked_about_again(redis_db, monkeypatch):
    """The cancel reads where the job is, then acts in one script: a claim that parks it in between
    sends it round once more, and the cancel still takes it out."""
    store = Store.of(redis_db)
    pause(job=jobs.record)
    handle = jobs.record.enqueue("moving")
    real = redis_db.hmget
    calls = []

    def read_then_park(*args, **kwargs):
        found = real(*args, **kwargs)
        if not calls:
            run_jobs()  # parks the job after the cancel read it as queued
        calls.append(found)
        return found

    monkeypatch.setattr(store.connection, "hmget", read_then_park)
    assert store.cancel(handle.id, 60) is CancelResult.CANCELLED
    assert len(calls) == 2
    assert not redis_db.exists(PARKED)


def test_the_overview_read_model_counts_held_jobs_apart_from_ready_ones(redis_db):
    from django_jobs.ops import inspection as inspect

    pause(job=jobs.record)
    pause(queue="emails", reason="later")
    for n in range(3):
        jobs.record.enqueue(f"held-{n}")
    jobs.greet.options(queue="emails").enqueue("waits")
    run_jobs(["default"])
    (server,) = inspect.servers(["default", "emails"])
    queues = {q.name: q for q in server.queues}
    assert (queues["default"].depth, queues["default"].held, queues["default"].paused) == (0, 3, None)
    assert (queues["emails"].depth, queues["emails"].held) == (1, 0)
    assert queues["emails"].paused is not None and queues["emails"].paused.reason == "later"
    assert server.held == {"tests.record": 3}


# --- bad input and garbage ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"queue": "nowhere"}, ConfigurationError, "not in settings.RQ_QUEUES"),
        ({"job": "tests.nothing"}, JobNotFound, "No job is registered under the name 'tests.nothing'"),
        ({}, ValueError, "exactly one of queue= and job="),
        ({"queue": "default", "job": "tests.record"}, ValueError, "exactly one"),
        ({"queue": "default", "reason": "x" * 501}, ValueError, "at most 500 characters"),
        ({"queue": 7}, ValueError, "queue= takes a queue's name"),
    ],
)
def test_bad_arguments_are_clear_errors_and_pause_nothing(redis_db, arguments, error, says):
    with pytest.raises(error, match=says):
        pause(**arguments)
    assert not redis_db.exists("djjobs:paused")


def test_a_job_type_no_longer_registered_can_still_be_resumed_by_name(redis_db):
    Store.of(redis_db).pause("job", "billing.removed", by="ops", reason="")
    with pytest.raises(JobNotFound):
        pause(job="billing.removed")
    assert resume(job="billing.removed").was_paused is True
    with pytest.raises(JobNotFound):
        resume(job="billing.removed")


def test_garbage_in_the_paused_hash_still_pauses_and_never_breaks_a_reader(redis_db):
    redis_db.hset("djjobs:paused", mapping={"queue:emails": b"\xff not json", "nonsense": "1", "job:": "{}"})
    (one,) = paused()
    assert (one.kind, one.name, one.at, one.reason) == ("queue", "emails", None, "(unreadable pause record)")
    jobs.record.options(queue="emails").enqueue("held")
    assert run_jobs() == 0
    assert resume(queue="emails").was_paused is True
    assert run_jobs() == 1


def test_get_job_of_an_unknown_id_is_still_unknown(redis_db):
    pause(queue="default")
    with pytest.raises(JobDoesNotExist):
        get_job("nothing")


def test_a_pause_is_stamped_with_redis_time(redis_db):
    seconds, micros = redis_db.time()
    pause(queue="default")
    record = json.loads(redis_db.hget("djjobs:paused", "queue:default"))
    assert abs(record["at"] - (seconds + micros / 1e6)) < 5
    assert dt.datetime.fromtimestamp(record["at"], dt.UTC) == paused()[0].since
