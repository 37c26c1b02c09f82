"""Django's Tasks framework on django_jobs, driven through the framework's public API only: ``@task``,
``enqueue``/``aenqueue``, ``using()``, ``get_result``, ``refresh``, ``TaskContext``, its exceptions and
signals, against real Redis and a real database. ``run_jobs()`` is the worker, in process."""

from __future__ import annotations

import contextlib
import datetime as dt
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_jobs import cancel
from django_jobs.models import DeadLetter
from django_jobs.tasks import InvalidTaskError, JobsBackend, ResultDoesNotExist
from django_jobs.testing import immediate_jobs, run_jobs
from tests.conftest import wait_for
from tests.tasks_api import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from tests.testapp import jobs, tasks
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def finished(result):
    """Run what is due, then the task's result once it is finished (for ``wait_for``)."""
    run_jobs()
    result.refresh()
    return result if result.is_finished else None


@contextlib.contextmanager
def received(*signals):
    """Every (signal, status, attempts) sent while inside, in order."""
    seen: list[tuple[object, str, int, object]] = []

    def receiver(signal, sender, task_result, **kwargs):
        seen.append((signal, task_result.status, task_result.attempts, task_result))

    for signal in signals:
        signal.connect(receiver, weak=False)
    try:
        yield seen
    finally:
        for signal in signals:
            signal.disconnect(receiver)


def test_the_backend_supports_everything_the_framework_asks():
    backend = task_backends["default"]
    assert isinstance(backend, JobsBackend) and default_task_backend.alias == "default"
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)
    assert backend.check() == []


def test_an_enqueued_task_reads_back_equal_then_runs_and_returns_its_value():
    result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert (result.args, result.kwargs, result.attempts, result.errors) == ([2], {"b": 3}, 0, [])
    assert result.enqueued_at is not None and result.started_at is None and result.task == tasks.add
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018
    assert tasks.add.get_result(result.id) == result == default_task_backend.get_result(result.id)

    assert run_jobs() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.attempts == 1 and result.worker_ids == ["django_jobs.testing"]
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    assert tasks.add.get_result(result.id).return_value == 5


def test_a_task_enqueued_in_a_transaction_that_rolls_back_never_runs():
    with contextlib.suppress(RuntimeError), transaction.atomic():
        gone = tasks.record.enqueue("rolled back")
        raise RuntimeError("roll back")
    with transaction.atomic():
        kept = tasks.record.enqueue("committed")
        with pytest.raises(TaskResultDoesNotExist):
            kept.refresh()  # it reaches Redis at commit
    run_jobs()
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["committed"]
    with pytest.raises(TaskResultDoesNotExist):
        tasks.record.get_result(gone.id)
    assert tasks.record.get_result(kept.id).status == TaskResultStatus.SUCCESSFUL


def test_a_rolled_back_savepoint_takes_its_tasks_with_it():
    with transaction.atomic():
        tasks.record.enqueue("outer")
        with contextlib.suppress(RuntimeError), transaction.atomic():
            tasks.record.enqueue("inner")
            raise RuntimeError("roll back the savepoint")
    run_jobs()
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["outer"]


def test_the_database_option_is_the_commit_tasks_wait_for():
    backends = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend", "OPTIONS": {"DATABASE": "other"}}}
    with override_settings(TASKS=backends):
        with contextlib.suppress(RuntimeError), transaction.atomic(using="other"):
            tasks.record.enqueue("other rolled back")
            raise RuntimeError("roll back")
        with transaction.atomic(using="other"), transaction.atomic():
            tasks.record.enqueue("other committed")  # two transactions: the option says which counts
    run_jobs()
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["other committed"]


def test_run_after_defers_the_task():
    later = timezone.now() + dt.timedelta(seconds=1)
    result = tasks.record.using(run_after=later).enqueue("deferred")
    assert result.task.run_after == later
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.READY and not SideEffect.objects.exists()
    wait_for(lambda: finished(result), timeout=10)
    assert result.started_at >= later
    assert SideEffect.objects.get().key == "deferred"


def test_queue_name_is_the_django_jobs_queue():
    on_emails = tasks.mail.enqueue("a")
    on_default = tasks.mail.using(queue_name="default").enqueue("b")
    assert run_jobs(["default"]) == 1
    assert tasks.mail.get_result(on_default.id).return_value == "b"
    assert tasks.mail.get_result(on_default.id).task.queue_name == "default"
    assert tasks.mail.get_result(on_emails.id).status == TaskResultStatus.READY
    assert run_jobs(["emails"]) == 1
    assert tasks.mail.get_result(on_emails.id).task == tasks.mail


def test_a_failing_task_retries_with_its_errors_then_fails_into_a_dead_letter():
    result = tasks.fails.enqueue("boom")
    run_jobs()
    result.refresh()
    assert result.status == TaskResultStatus.READY  # retrying: ready again, with its errors so far
    assert [e.exception_class for e in result.errors] == [ValueError] and result.attempts == 1
    wait_for(lambda: finished(result))
    assert result.status == TaskResultStatus.FAILED and result.attempts == 3  # OPTIONS["RETRY"]
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    assert all(e.traceback.endswith("ValueError: boom\n") for e in result.errors) and len(result.errors) == 3
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    assert DeadLetter.objects.get(job_id=result.id).reason == DeadLetter.Reason.EXHAUSTED


def test_per_task_options_make_an_exception_permanent_and_a_timeout_short():
    voided = tasks.voided.enqueue("v")
    overrun = tasks.overruns.enqueue(30)
    started = time.monotonic()
    run_jobs()
    assert time.monotonic() - started < 5  # its timeout is 0.5 s
    for result, exception in (
        (voided, "tests.testapp.tasks.Voided"),
        (overrun, "django_jobs.exceptions.JobTimeout"),
    ):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED and result.attempts == 1
        assert result.errors[0].exception_class_path == exception
    assert DeadLetter.objects.get(job_id=voided.id).reason == DeadLetter.Reason.PERMANENT


def test_task_context_tells_the_attempt_and_the_running_result():
    result = tasks.flaky.enqueue("ctx", failures=1)
    wait_for(lambda: finished(result))
    assert result.return_value == {"attempt": 2, "errors": 1}  # the second attempt saw the first's error
    seen = sorted(SideEffect.objects.values_list("key", flat=True))
    assert seen == [f"ctx:1:{result.id}", f"ctx:2:{result.id}"]
    own = tasks.own_id.enqueue()
    run_jobs()
    assert tasks.own_id.get_result(own.id).return_value == own.id


def test_an_async_task_through_aenqueue_aget_result_and_arefresh():
    result = async_to_sync(tasks.async_add.aenqueue)(1, 2)
    assert result.status == TaskResultStatus.READY
    assert async_to_sync(tasks.async_add.aget_result)(result.id) == result
    run_jobs()
    async_to_sync(result.arefresh)()
    assert result.return_value == {"sum": 3, "attempt": 1}
    assert SideEffect.objects.get().key == "async:1+2"


def test_return_values_are_kept_as_the_framework_keeps_them_and_others_fail_for_good():
    pair, not_json = tasks.pair.enqueue(), tasks.not_json.enqueue()
    run_jobs()
    assert tasks.pair.get_result(pair.id).return_value == [1, "two"]
    failed = tasks.not_json.get_result(not_json.id)
    assert failed.status == TaskResultStatus.FAILED and failed.attempts == 1  # never rerun
    assert issubclass(failed.errors[0].exception_class, TypeError)
    assert "Unsupported type" in failed.errors[0].traceback


def test_arguments_must_be_json_as_the_framework_says():
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.add.enqueue(dt.datetime.now(), 1)
    assert run_jobs() == 0


def test_unknown_ids_and_jobs_that_are_no_tasks_do_not_exist():
    plain = jobs.record.enqueue("a plain job")
    for result_id in ("0" * 32, "not an id", plain.id):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)
        with pytest.raises(ResultDoesNotExist):
            async_to_sync(default_task_backend.aget_result)(result_id)


def test_a_bad_queue_or_priority_is_an_invalid_task():
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")
    for priority in (101, -101, 1.5):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            tasks.add.using(priority=priority)


def test_bad_options_stop_their_task_with_a_clear_error():
    backends = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend", "OPTIONS": {"TIMEOUT": -1}}}
    with (
        override_settings(TASKS=backends),
        pytest.raises(InvalidTaskError, match=r"\['TIMEOUT'\] must be a positive"),
    ):
        tasks.add.using(priority=1)
    assert issubclass(InvalidTaskError, InvalidTask)


def test_check_reports_queues_and_options_django_jobs_cannot_serve(settings):
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "pickled": {"URL": settings.REDIS_URL}}
    backends = {
        "default": {
            "BACKEND": "django_jobs.tasks.JobsBackend",
            "QUEUES": ["default", "missing", "pickled"],
            "OPTIONS": {"TIMOUT": 5, "RETRY": {"max_attempts": 0}, "TASKS": {"tests.testapp.tasks.nope": {}}},
        }
    }
    with override_settings(TASKS=backends):
        found = {(m.id, m.msg) for m in task_backends["default"].check()}
    assert (
        "django_jobs.E018",
        "TASKS['default']['QUEUES'] names 'missing', which is not in RQ_QUEUES.",
    ) in found
    assert any(i == "django_jobs.E019" and "'pickled'" in m for i, m in found)
    assert any(
        i == "django_jobs.E020" and "unknown key 'TIMOUT' (did you mean 'TIMEOUT'?)" in m for i, m in found
    )
    assert any(i == "django_jobs.E020" and "['RETRY'] must be a dict of RetryPolicy" in m for i, m in found)
    assert any(i == "django_jobs.E021" and "'tests.testapp.tasks.nope'" in m for i, m in found)


def test_a_task_of_another_backend_is_not_registered_as_ours():
    from django_jobs.core import registry
    from django_jobs.exceptions import JobNotFound

    with pytest.raises(JobNotFound):
        registry.get(tasks.elsewhere.module_path)
    with pytest.raises(InvalidTaskError, match="not registered with django_jobs"):
        default_task_backend.enqueue(tasks.elsewhere, [], {})


def test_signals_are_sent_as_django_documents_them():
    with received(task_enqueued, task_started, task_finished) as seen:
        ok = tasks.add.enqueue(1, 1)
        bad = tasks.fails.enqueue("signalled")
        assert [(s, status) for s, status, *_ in seen] == [(task_enqueued, "READY")] * 2
        wait_for(lambda: finished(bad))
    by_task = {ok.id: [], bad.id: []}
    for signal, status, attempts, result in seen:
        by_task[result.id].append((signal, status, attempts))
    assert by_task[ok.id] == [
        (task_enqueued, "READY", 0),
        (task_started, "RUNNING", 1),
        (task_finished, "SUCCESSFUL", 1),
    ]
    assert by_task[bad.id] == [
        (task_enqueued, "READY", 0),
        (task_started, "RUNNING", 1),
        (task_started, "RUNNING", 2),  # a retried attempt starts again; it has not finished
        (task_started, "RUNNING", 3),
        (task_finished, "FAILED", 3),
    ]
    final = next(r for s, _, _, r in seen if s is task_finished and r.id == bad.id)
    assert len(final.errors) == 3 and final.errors[-1].exception_class is ValueError


def test_a_task_cancelled_while_it_runs_is_finished_and_one_cancelled_while_it_waits_never_started():
    with received(task_started, task_finished) as seen:
        ran = tasks.cancels_itself.enqueue("asked")
        waiting = tasks.record.using(run_after=timezone.now() + dt.timedelta(minutes=5)).enqueue("never")
        assert str(cancel(waiting.id)) == "cancelled"
        assert run_jobs() == 1
    assert [(signal, status, result.id) for signal, status, _, result in seen] == [
        (task_started, "RUNNING", ran.id),
        (task_finished, "FAILED", ran.id),  # a cancelled task reads FAILED
    ]
    sent = seen[-1][3]
    ran.refresh()
    assert ran.status == TaskResultStatus.FAILED and ran.attempts == sent.attempts == 1
    assert [e.exception_class_path for e in sent.errors] == [e.exception_class_path for e in ran.errors]
    assert [e.exception_class_path for e in ran.errors] == ["django_jobs.exceptions.JobCancelled"]
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["asked:requested"]


def test_immediate_mode_runs_tasks_inline():
    with immediate_jobs():
        tasks.record.enqueue("inline")
    assert SideEffect.objects.get().key == "inline"


def test_priorities_start_higher_first__needs_job_priorities():
    """``priority`` maps to the job's priority (``job.options(priority=N)``): of a queue's ready tasks
    the highest starts first, equal ones in order."""
    for key, priority in (("low", -10), ("zero", 0), ("high", 10), ("top", 100), ("zero again", 0)):
        tasks.record.using(priority=priority).enqueue(key)
    run_jobs()
    assert list(SideEffect.objects.order_by("id").values_list("key", flat=True)) == [
        "top", "high", "zero", "zero again", "low",
    ]  # fmt: skip
