"""An ``rqworker`` left on a django_jobs queue (a migration from django-rq, an old deployment): a real
one takes a django_jobs job and fails it into RQ's failed registry. Nothing fails silently: the check
names the worker, and runjobs moves the job into the dead letters, from which it runs once requeued."""

from __future__ import annotations

import contextlib
import io

import pytest
from django.core import checks
from django.core.management import CommandError, call_command

from django_jobs import get_job
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import keys
from django_jobs.store.lifecycle import State
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True, databases="__all__")]


def health(*args: str) -> str:
    out = io.StringIO()
    with contextlib.suppress(CommandError):  # the exit code is not the point here
        call_command("jobs_health", *args, "--skip", "workers", stdout=out)
    return out.getvalue()


def test_a_job_an_rqworker_failed_ends_as_a_dead_letter_and_the_check_names_the_worker(redis_db, runjobs):
    rq = runjobs("default", command="rqworker")
    wait_for(lambda: redis_db.scard(keys.WORKERS_SET) == 1, timeout=30)
    (line,) = [line for line in health("default").splitlines() if "foreign" in line]
    assert line.startswith("WARN foreign: ") and "serves default, not being runjobs" in line
    (warning,) = [m for m in checks.run_checks() if m.id == "django_jobs.W012"]
    assert "serves default: an rqworker fails every django_jobs job it takes" in warning.msg
    rq.kill_tree()  # its record stays until it expires: the warning with it

    handle = jobs.record.enqueue("taken")
    second = runjobs("default", command="rqworker")  # takes the job and fails it
    wait_for(lambda: redis_db.zscore(keys.failed_key("default"), handle.id) is not None, timeout=30)
    second.kill_tree()  # stopped at once: RQ's warm shutdown may wait on its own bookkeeping
    assert get_job(handle.id).state is State.FOREIGN

    a = runjobs("emails")  # not on default: its maintenance looks at every queue of its server
    letter = wait_for(lambda: DeadLetter.objects.filter(job_id=handle.id).first(), timeout=30)
    assert letter.reason == DeadLetter.Reason.FOREIGN and letter.args == ["taken"]
    assert letter.exception == "django_jobs.exceptions.ForeignWorker"
    assert "RQ says: rq.exceptions.DeserializationError" in letter.message
    assert "DeserializationError" in letter.traceback
    assert redis_db.zscore(keys.failed_key("default"), handle.id) is None
    wait_for(lambda: "A foreign worker, " in a.output(), timeout=10)

    runjobs("default")  # no rqworker runs any more
    (requeued,) = deadletter.requeue([letter]).entries
    wait_for(lambda: SideEffect.objects.filter(key="taken").exists(), timeout=30)
    assert requeued.requeued_job_id
