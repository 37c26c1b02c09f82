"""``manage.py jobs_deploy check``: before a deploy, every job already waiting (in Redis, in the
outbox, as an open dead letter) is bound to the code being deployed; a job that would fail is named
with why and a sample id, and the exit code says so. It never writes."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from django_jobs import job
from django_jobs.core import registry
from django_jobs.testing import run_jobs
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def check() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("jobs_deploy", "check", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def deploy(name: str, func, **options) -> None:
    """The code being deployed: ``name`` now runs ``func`` (what the release changed)."""
    registry._registry.pop(name, None)
    job(name=name, timeout=10, **options)(func)


def test_a_backlog_that_binds_passes_and_nothing_is_written(redis_db):
    jobs.record.enqueue("a")
    jobs.record.options(delay=600).enqueue("b")
    with transaction.atomic():
        jobs.greet.enqueue("c")
    before = {key: redis_db.dump(key) for key in redis_db.keys("*")}
    code, out = check()
    assert (
        code == 0
        and out.startswith("ok   3 job(s) checked in ")
        and out.rstrip().endswith("binds to this code")
    )
    assert {key: redis_db.dump(key) for key in redis_db.keys("*")} == before


@pytest.mark.usefixtures("restore_registry")
def test_a_renamed_job_fails_unless_an_alias_keeps_its_old_name(redis_db):
    def shipped(key: str) -> None: ...

    job(name="billing.send_invoice", timeout=10)(shipped)
    waiting = registry.get("billing.send_invoice").enqueue("x").id
    registry._registry.pop("billing.send_invoice")

    def renamed(key: str) -> None: ...

    job(name="billing.invoice_send", timeout=10)(renamed)
    code, out = check()
    assert code == 1
    assert (
        f"FAIL billing.send_invoice: 1 job(s) will not run: no job or alias of this name (e.g. {waiting})"
        in out
    )
    registry._registry.pop("billing.invoice_send")
    job(name="billing.invoice_send", aliases=["billing.send_invoice"], timeout=10)(renamed)
    assert check()[0] == 0


@pytest.mark.usefixtures("restore_registry")
def test_a_new_required_argument_fails_the_waiting_the_scheduled_and_the_dead_lettered(redis_db):
    jobs.greet.enqueue("ada")
    jobs.greet.options(delay=600).enqueue("bob")
    dead = jobs.permanent.enqueue("cy").id
    run_jobs(queues=["default"], limit=1)  # the first waiting one (greet ada) ran

    def greet(key: str, locale: str) -> None: ...

    def permanent(key: str, strict: bool) -> None: ...

    deploy("tests.greet", greet)
    deploy("tests.permanent", permanent)
    code, out = check()
    assert code == 1
    assert "FAIL tests.greet: 1 job(s) will not run: missing a required argument: 'locale'" in out
    assert (
        f"FAIL tests.permanent: 1 job(s) will not run: missing a required argument: 'strict' (e.g. {dead})"
        in out
    )
    assert "2 of 2 job(s) checked" in out


@pytest.mark.usefixtures("restore_registry")
def test_an_unexpected_keyword_is_named(redis_db):
    jobs.greet.enqueue("ada", greeting="hi")

    def greet(key: str) -> None: ...

    deploy("tests.greet", greet)
    code, out = check()
    assert code == 1 and "got an unexpected keyword argument 'greeting'" in out


def test_a_backlog_larger_than_a_batch_is_read_whole(redis_db):
    jobs.record.enqueue_many([(f"r{n}",) for n in range(25)])
    out = io.StringIO()
    call_command("jobs_deploy", "check", "--batch", "7", stdout=out)
    assert out.getvalue().startswith("ok   25 job(s) checked")
