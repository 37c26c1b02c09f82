"""Tasks of Django's Tasks framework run by a real ``runjobs``: the test process enqueues through the
framework's API and reads the results back; the worker sends the task signals, from whichever of its
processes decided each end (a work process, or the supervisor for a work process that died)."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from django.db import transaction

from tests.conftest import wait_for
from tests.tasks_api import TaskResultStatus
from tests.testapp import tasks
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def refreshed(result):
    result.refresh()
    return result.is_finished


def test_runjobs_runs_tasks_with_retries_timeouts_results_and_signals(runjobs, redis_db):
    with contextlib.suppress(RuntimeError), transaction.atomic():
        tasks.record.enqueue("rolled back")
        raise RuntimeError("roll back")
    with transaction.atomic():
        committed = tasks.record.enqueue("committed")
    results = {
        "add": tasks.add.enqueue(2, b=3),
        "flaky": tasks.flaky.enqueue("acc", failures=1),
        "fails": tasks.fails.enqueue("for good"),
        "async": tasks.async_add.enqueue(4, 5),
        "exits": tasks.exits.enqueue(),
        "committed": committed,
    }
    worker = runjobs("--concurrency", "2")
    for result in results.values():
        wait_for(lambda result=result: refreshed(result), timeout=60)
    ok = TaskResultStatus.SUCCESSFUL
    assert results["add"].status == ok and results["add"].return_value == 5
    assert results["add"].worker_ids[0].split(".")[0] == os.uname().nodename.split(".")[0]
    assert results["flaky"].return_value == {"attempt": 2, "errors": 1}
    assert results["async"].return_value == {"sum": 9, "attempt": 1}
    assert results["fails"].status == TaskResultStatus.FAILED and results["fails"].attempts == 3
    assert results["exits"].status == TaskResultStatus.FAILED and results["exits"].attempts == 3
    assert {e.exception_class_path for e in results["exits"].errors} == {"django_jobs.exceptions.WorkerLost"}
    assert list(
        SideEffect.objects.filter(key__in=["committed", "rolled back"]).values_list("key", flat=True)
    ) == ["committed"]

    # A failure's signal follows its status: dead-lettering runs first in the outcome pipeline.
    wait_for(lambda: redis_db.llen(tasks.FINISHED) >= len(results))
    notes = [json.loads(n) for n in redis_db.lrange(tasks.FINISHED, 0, -1)]
    assert sorted((n["id"], n["status"], n["attempts"]) for n in notes) == sorted(
        (r.id, r.status, r.attempts) for r in results.values()
    )  # one task_finished per task, none for the attempts that were retried
    assert os.getpid() not in {n["pid"] for n in notes}  # all sent by runjobs
    died = next(n for n in notes if n["id"] == results["exits"].id)
    assert died["pid"] == worker.proc.pid  # its supervisor settled the attempt whose process died
    assert worker.terminate() == 0
