"""A job's code can ask which job and which attempt it is (for progress, logs, idempotency keys)."""

from __future__ import annotations

import pytest

from django_jobs import current_job
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_outside_a_job_there_is_no_current_job():
    assert current_job() is None


def test_each_attempt_sees_its_job_and_its_own_attempt_number():
    handle = jobs.note_context.enqueue("ctx", failures=1)
    wait_for(lambda: run_jobs() >= 0 and SideEffect.objects.filter(key__startswith="ctx:").count() == 2)
    seen = sorted(SideEffect.objects.filter(key__startswith="ctx:").values_list("key", flat=True))
    assert seen == [f"ctx:{handle.id}:tests.note_context:default:{n}" for n in (1, 2)]
    assert current_job() is None  # reset once the attempt ended
