"""Batches, run in-process: the callbacks run once when every member has ended, however the members
end (succeeded, retried, dead-lettered, requeued, cancelled, gone), and whatever event was lost."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobs import PermanentError
from django_jobs.core import outcomes
from django_jobs.core.connections import get_connection
from django_jobs.exceptions import PayloadError
from django_jobs.failures import deadletter, retrying
from django_jobs.flow import idempotency
from django_jobs.models import Batch, BatchCallback, BatchMember, DeadLetter, OutboxEntry
from django_jobs.store import Store
from django_jobs.telemetry import metrics
from django_jobs.testing import capture_jobs, immediate_jobs, run_jobs
from django_jobs.worker.maintenance import Maintenance
from django_jobs.workflows import batches
from django_jobs.workflows.batches import batch, batch_callback
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect

# The sweep reads the outbox of every database that has one.
pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def drain(timeout: float = 15.0) -> None:
    """Run jobs in this process until none ran for half a second (a retry backs off 0.2 s at most);
    jobs due in an hour stay where they are."""
    deadline = time.monotonic() + timeout
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 0.5:
        if run_jobs():
            idle_since = time.monotonic()
        assert time.monotonic() < deadline, "jobs kept running"
        time.sleep(0.02)


def relay() -> None:
    """The runjobs relay, once, as if every outbox row were over a second old: it pushes the rows
    and prunes those of jobs already in Redis."""
    OutboxEntry.objects.update(created_at=OutboxEntry.objects.first().created_at.replace(year=2000))
    Maintenance(Store.of(get_connection("default")), ["default"], 0.1).relay.run()


def callbacks_ran() -> list[str]:
    """The keys the callbacks recorded, one per run: ``label|batch|status|succeeded|ended``."""
    return sorted(SideEffect.objects.filter(key__startswith="cb-").values_list("key", flat=True))


def both() -> dict[str, object]:
    return {
        "on_success": jobs.batch_done.bind("cb-success"),
        "on_complete": jobs.batch_done.bind("cb-complete"),
    }


def states(created: Batch) -> dict[str, str]:
    return dict(BatchCallback.objects.filter(batch=created).values_list("kind", "state"))


def test_the_callbacks_run_once_when_every_member_succeeded(redis_db):
    with batch(**both(), name="three records") as created:
        for key in ("a", "b"):
            jobs.record.enqueue(key)
        jobs.fails_then_succeeds.enqueue("c", failures=2)  # retried twice, counted once
    assert created.total == 3
    member = BatchMember.objects.filter(job_name="tests.record", batch=created).first()
    assert redis_db.hget(f"rq:job:{member.job_id}", "dj_batch") == str(created.pk).encode()
    drain()
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.succeeded, done.ended, done.pending) == ("succeeded", 3, 0, 0)
    assert done.finished_at is not None
    assert callbacks_ran() == [
        f"cb-complete|{created.pk}|succeeded|3|0",
        f"cb-success|{created.pk}|succeeded|3|0",
    ]
    assert states(created) == {"success": "ran", "complete": "ran"}
    ran = BatchCallback.objects.get(batch=created, kind="success")
    assert ran.ran_at is not None and redis_db.hget(f"rq:job:{ran.job_id}", "status") == b"finished"


def test_a_rolled_back_batch_never_exists(redis_db):
    with pytest.raises(RuntimeError), transaction.atomic():
        with batch(**both()):
            jobs.record.enqueue("never")
        raise RuntimeError("the order failed after its batch")
    assert not Batch.objects.exists() and not BatchMember.objects.exists()
    assert not OutboxEntry.objects.exists() and not redis_db.keys("rq:job:*")


@pytest.mark.usefixtures("fast")
def test_a_batch_committed_while_redis_is_down_is_pushed_by_the_relay_and_fires(private_redis):
    private_redis.stop()
    with batch(**both()) as created:
        jobs.record.enqueue_many([("x",), ("y",)])
    assert OutboxEntry.objects.filter(batch=str(created.pk)).count() == 2
    private_redis.start()
    relay()
    drain()
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.SUCCEEDED
    assert len(callbacks_ran()) == 2


def test_a_dead_lettered_member_ends_the_batch_without_success(redis_db):
    with batch(**both()) as created:
        jobs.record.enqueue("fine")
        jobs.needs_fix.enqueue("broken")
    drain()
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.succeeded, done.ended) == ("failed", 1, 1)
    assert callbacks_ran() == [f"cb-complete|{created.pk}|failed|1|1"]  # on_success never runs
    assert states(created) == {"success": "skipped", "complete": "ran"}
    member = BatchMember.objects.get(job_name="tests.needs_fix")
    assert (member.state, member.reason) == ("ended", "dead-lettered")


def test_a_requeued_member_is_pending_again_and_its_success_counts(redis_db):
    with batch(**both()) as created:
        jobs.needs_fix.enqueue("charge")
        later = jobs.record.enqueue_in(3600, "later")  # keeps the batch open
    drain()
    entry = DeadLetter.objects.get(job_name="tests.needs_fix")
    assert Batch.objects.get(pk=created.pk).ended == 1
    SideEffect.objects.create(key="fixed:charge")
    deadletter.requeue([entry])
    entry.refresh_from_db()
    member = BatchMember.objects.get(job_name="tests.needs_fix")
    assert (member.job_id, member.state) == (entry.requeued_job_id, "pending")
    assert Batch.objects.get(pk=created.pk).ended == 0
    drain()  # the requeued job succeeds; its hash names no batch, so the sweep counts it
    assert batches.reconcile([created.pk]) == 1
    assert BatchMember.objects.get(pk=member.pk).state == "succeeded"
    assert retrying.retry_now(later.id).outcome is retrying.RetryOutcome.STARTED
    drain()
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.SUCCEEDED
    assert callbacks_ran() == [
        f"cb-complete|{created.pk}|succeeded|2|0",
        f"cb-success|{created.pk}|succeeded|2|0",
    ]


def test_a_requeue_after_the_batch_fired_runs_the_job_on_its_own(redis_db):
    with batch(**both()) as created:
        jobs.needs_fix.enqueue("late")
    drain()
    assert callbacks_ran() == [f"cb-complete|{created.pk}|failed|0|1"]
    SideEffect.objects.create(key="fixed:late")
    deadletter.requeue(DeadLetter.objects.all())
    drain()
    batches.reconcile([created.pk])
    assert SideEffect.objects.filter(key="late").exists()  # the job ran
    member = BatchMember.objects.get(batch=created)
    assert (member.state, member.reason) == ("ended", "dead-lettered")  # the batch's outcome stands
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.FAILED
    assert callbacks_ran() == [f"cb-complete|{created.pk}|failed|0|1"]  # and its callbacks do not rerun


def without_batch_subscriber() -> list[tuple[str, outcomes.Subscriber]]:
    """The pipeline as it was, and the same pipeline without the batch subscriber: what a worker
    killed between settling an attempt in Redis and publishing it leaves behind."""
    saved = list(outcomes._subscribers)
    outcomes.connect([s for s in saved if s[1] is not batches.on_attempt_ended])
    return saved


def test_a_lost_event_only_delays_the_callback_until_the_sweep(redis_db):
    with batch(**both()) as created:
        jobs.record.enqueue("a")
        jobs.needs_fix.enqueue("b")
    saved = without_batch_subscriber()
    try:
        drain()
    finally:
        outcomes.connect(saved)
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.OPEN
    batches.Sweep().step()
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.succeeded, done.ended) == ("failed", 1, 1)
    drain()
    assert callbacks_ran() == [f"cb-complete|{created.pk}|failed|1|1"]


@pytest.mark.usefixtures("fast")
def test_the_sweep_counts_a_cancelled_waiting_member_and_one_gone_from_redis(redis_db):
    with batch(**both()) as created:
        waiting = jobs.record.enqueue_in(3600, "cancelled")
        gone = jobs.record.enqueue_in(3600, "evicted")
        jobs.record.enqueue("done")
    relay()  # the runjobs relay prunes the outbox rows of pushed jobs
    waiting.cancel()  # a waiting job's cancel publishes no event
    redis_db.delete(f"rq:job:{gone.id}")  # evicted, or expired before any sweep saw its end
    drain()
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.OPEN
    batches.Sweep().step()
    ended = dict(BatchMember.objects.filter(state="ended").values_list("job_id", "reason"))
    assert ended == {waiting.id: "cancelled", gone.id: "expired"}
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.FAILED


@pytest.mark.usefixtures("fast")
def test_the_sweep_walks_the_pending_members_a_page_per_maintenance_pass(redis_db):
    with batch(**both()) as created:
        handles = jobs.record.enqueue_many([(f"k{i}",) for i in range(batches.PAGE + 100)])
    while OutboxEntry.objects.exists():
        relay()  # 500 rows a pass
    redis_db.delete(*[f"rq:job:{h.id}" for h in handles])  # every member gone from Redis unseen
    sweep = batches.Sweep()
    sweep.step()
    assert Batch.objects.get(pk=created.pk).ended == batches.PAGE
    sweep.step()
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.FAILED  # the walk's last page
    sweep.step()  # the next walk waits for BATCH_SWEEP_INTERVAL
    assert sweep.after == 0 and sweep.due > time.monotonic()


def test_a_member_ends_once_however_often_its_end_is_reported(redis_db):
    with batch(**both()) as created:
        handle = jobs.record.enqueue("twice")
    drain()
    assert batches.settle({handle.id: ("ended", "dead-lettered")}) == 0  # a later run's failure
    assert batches.settle({handle.id: ("succeeded", "")}) == 0
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.succeeded, done.ended) == ("succeeded", 1, 0)
    assert len(callbacks_ran()) == 2


def test_a_second_delivery_of_a_callback_does_nothing(redis_db):
    with batch(on_success=jobs.batch_done.bind("cb-success")) as created:
        jobs.record.enqueue("one")
    drain()
    jobs.batch_done.job.enqueue(str(created.pk), "success", "cb-success")  # the same callback, again
    drain()
    assert callbacks_ran() == [f"cb-success|{created.pk}|succeeded|1|0"]


def test_a_callback_that_fails_is_retried_and_its_writes_commit_once(redis_db):
    with batch(on_complete=jobs.batch_flaky_done.bind("cb-flaky")) as created:
        jobs.record.enqueue("one")
    drain()
    assert SideEffect.objects.filter(key=f"cb-flaky|{created.pk}").count() == 1
    assert states(created) == {"complete": "ran"}


def test_an_empty_batch_fires_as_its_block_ends(redis_db):
    with batch(**both()) as created:
        pass
    assert created.total == 0 and Batch.objects.get(pk=created.pk).status == Batch.Status.SUCCEEDED
    drain()
    assert callbacks_ran() == [
        f"cb-complete|{created.pk}|succeeded|0|0",
        f"cb-success|{created.pk}|succeeded|0|0",
    ]


def test_bad_callbacks_and_members_are_clear_errors():
    with pytest.raises(TypeError, match=r"takes a @batch_callback job.*plain @job 'tests.record'"):
        batch(on_success=jobs.record).__enter__()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cannot take these arguments"):
        jobs.batch_done.bind("a", "b")  # type: ignore[call-arg]
    with pytest.raises(PayloadError, match="model instance"):
        jobs.batch_done.bind(Item(name="x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="an async def cannot run inside the transaction"):

        @batch_callback(name="tests.async_callback", timeout=5)
        async def never(done: Batch) -> None: ...

    with pytest.raises(ValueError, match="do not nest"), batch(), batch():
        pass
    with pytest.raises(ValueError, match="its transaction on the 'default' database"), batch():
        jobs.record.using("other").enqueue("elsewhere")
    assert not Batch.objects.exists()


def test_in_immediate_mode_the_members_and_then_the_callbacks_run_inline():
    with immediate_jobs(), batch(**both()) as created:
        jobs.record.enqueue("inline")
    assert callbacks_ran() == [
        f"cb-complete|{created.pk}|succeeded|1|0",
        f"cb-success|{created.pk}|succeeded|1|0",
    ]


def test_in_immediate_mode_a_dead_lettered_member_completes_the_batch_through_the_pipeline():
    with pytest.raises(PermanentError), immediate_jobs(), batch(**both()) as created:
        jobs.record.enqueue("inline")
        jobs.permanent.enqueue("voided")  # raises to the commit, after its outcome was published
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.succeeded, done.ended) == ("failed", 1, 1)
    reasons = dict(BatchMember.objects.filter(batch=created).values_list("job_name", "reason"))
    assert reasons == {"tests.record": "", "tests.permanent": BatchMember.Reason.DEAD_LETTERED}
    assert callbacks_ran() == [f"cb-complete|{created.pk}|failed|1|1"]
    assert states(created) == {"success": "skipped", "complete": "ran"}


def test_capture_mode_records_the_members(redis_db):
    with capture_jobs() as captured, batch(**both()) as created:
        jobs.record.enqueue("captured")
    captured.assert_enqueued(jobs.record, "captured")
    assert BatchMember.objects.get(batch=created).job_id == captured.jobs[0].id


def test_a_plain_job_pays_no_query_for_batches(redis_db):
    jobs.record.enqueue("plain")
    with CaptureQueriesContext(connection) as queries:
        run_jobs()
    assert SideEffect.objects.filter(key="plain").exists()
    assert not [q["sql"] for q in queries.captured_queries if "django_jobs_batch" in q["sql"]]


def test_the_callbacks_fired_are_counted(redis_db):
    before = metrics.BATCH_CALLBACKS.labels("complete")._value.get()
    with batch(on_complete=jobs.batch_done.bind("cb-complete")):
        jobs.record.enqueue("counted")
    drain()
    assert metrics.BATCH_CALLBACKS.labels("complete")._value.get() == before + 1


def test_batches_that_ended_long_ago_are_pruned_with_their_rows_unless_a_callback_is_unsettled(
    redis_db, monkeypatch
):
    calls: list[str] = []

    def broken() -> int:
        calls.append("keys")
        raise RuntimeError("the key prune broke")

    made = {}
    for label in ("old", "recent", "old but its callback waits"):
        with batch(**both(), name=label) as made[label]:
            jobs.record.enqueue(label)
    with batch(**both(), name="open") as made["open"]:
        jobs.record.enqueue_in(3600, "later")
    drain()
    long_ago = timezone.now() - dt.timedelta(days=31)
    Batch.objects.filter(name__startswith="old").update(finished_at=long_ago)
    Batch.objects.filter(name="open").update(created_at=long_ago)
    waiting = made["old but its callback waits"]
    BatchCallback.objects.filter(batch=waiting, kind="complete").update(state=BatchCallback.State.ENQUEUED)
    monkeypatch.setattr(idempotency, "prune", broken)  # a failing key prune holds nothing back
    maintenance = Maintenance(Store.of(get_connection("default")), ["default"], 0.1)
    maintenance.tick()  # every duty that is due: both prunes are, on a first pass
    assert calls == ["keys"]
    kept = sorted(Batch.objects.values_list("name", flat=True))
    assert kept == ["old but its callback waits", "open", "recent"]
    gone = made["old"].pk
    assert not BatchMember.objects.filter(batch_id=gone) and not BatchCallback.objects.filter(batch_id=gone)
    assert BatchMember.objects.filter(batch=waiting).count() == 1
    assert states(waiting)["complete"] == "enqueued"


def test_the_retention_of_batches_is_a_setting(redis_db, settings):
    settings.JOBS = {**settings.JOBS, "BATCH_RETENTION": 60}
    with batch(**both(), name="a minute ago"):
        jobs.record.enqueue("x")
    drain()
    Batch.objects.update(finished_at=timezone.now() - dt.timedelta(seconds=90))
    assert batches.prune() == 1 and not Batch.objects.exists() and not BatchMember.objects.exists()
