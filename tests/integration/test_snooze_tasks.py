"""A Django ``@task`` snoozes as a ``@job`` does: raised or returned, ``Snooze`` runs it again later
without spending an attempt, its result reads READY meanwhile, and ``task_finished`` is sent once,
when it is done."""

from __future__ import annotations

import pytest

from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.tasks_api import TaskResultStatus, task_finished
from tests.testapp import tasks
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("returned", [False, True], ids=["raised", "returned"])
def test_a_task_that_snoozes_runs_again_without_spending_an_attempt(returned):
    sent: list[str] = []

    def receiver(sender, task_result, **kwargs):
        sent.append(str(task_result.status))

    task_finished.connect(receiver, weak=False, dispatch_uid="t-snooze")
    try:
        result = tasks.snoozes.enqueue("t", times=2, returned=returned)
        assert run_jobs() == 1
        result.refresh()
        assert result.status == TaskResultStatus.READY and result.errors == [] and result.attempts == 0
        wait_for(lambda: run_jobs() >= 0 and (result.refresh() or result.is_finished))
    finally:
        task_finished.disconnect(dispatch_uid="t-snooze")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 1} and result.attempts == 1
    assert list(SideEffect.objects.order_by("pk").values_list("key", flat=True)) == ["t:1", "t:1", "t:1"]
    assert sent == [str(TaskResultStatus.SUCCESSFUL)]
