"""Failure groups: the fingerprint (job + exception class + raising frame) is stable across line
edits and deploys, dead letters from the real worker are grouped by it, and each group links to its
filtered list and can be requeued as a whole after a confirmation."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection
from django.urls import reverse

from django_jobs.failures.triage import fingerprint, raising_frame, triage
from django_jobs.models import DeadLetter
from tests.integration.dashboard_support import drain, operator, record, traceback_text
from tests.testapp import jobs

GROUPS = reverse("admin:django_jobs_deadletter_groups")

CHAINED = """Traceback (most recent call last):
  File "/venv/lib/python3.12/site-packages/requests/adapters.py", line 10, in send
    raise ConnectionError(err)
ConnectionError: refused

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/srv/app/releases/41/shop/jobs.py", line 88, in charge
    return gateway.charge(order)
  File "/srv/app/releases/41/shop/gateway.py", line 12, in charge
    raise PaymentFailed("gateway down")
shop.gateway.PaymentFailed: gateway down
"""


def test_the_raising_frame_is_the_last_frame_of_the_last_exception():
    assert raising_frame(CHAINED) == "shop/gateway.py in charge"
    assert raising_frame("django_jobs.exceptions.WorkerLost: the worker died") == ""
    assert raising_frame(CHAINED.replace("/srv/app/releases/41/", "C:\\app\\")) == "shop/gateway.py in charge"
    site = '  File "/opt/venv/lib/python3.11/site-packages/stripe/api/charge.py", line 3, in create\n'
    assert raising_frame(site) == "stripe/api/charge.py in create"


def test_the_fingerprint_ignores_line_numbers_and_install_paths_but_not_the_function():
    base = triage("shop.charge", "shop.gateway.PaymentFailed", CHAINED, [])
    moved = CHAINED.replace("line 12", "line 40").replace("releases/41", "releases/42")
    assert triage("shop.charge", "shop.gateway.PaymentFailed", moved, []).fingerprint == base.fingerprint
    other = CHAINED.replace("in charge\n    raise", "in refund\n    raise")
    assert triage("shop.charge", "shop.gateway.PaymentFailed", other, []).fingerprint != base.fingerprint
    assert fingerprint("shop.refund", "shop.gateway.PaymentFailed", base.raised_at) != base.fingerprint
    assert fingerprint("shop.charge", "builtins.ValueError", base.raised_at) != base.fingerprint


def test_first_failure_comes_from_the_attempt_history():
    facts = triage("j", "E", "", [{"attempt": 1, "at": "2024-05-01T03:00:00+00:00"}, {"attempt": 2}])
    assert (
        facts.first_failed_at is not None and facts.first_failed_at.isoformat() == "2024-05-01T03:00:00+00:00"
    )
    assert triage("j", "E", "", []).first_failed_at is None
    assert triage("j", "E", "", [{"at": "garbage"}]).first_failed_at is None


@pytest.mark.django_db(transaction=True)
def test_dead_letters_from_the_worker_are_grouped_by_failure(client):
    for key in ("a", "b", "c"):
        jobs.invalid.enqueue(key)  # permanent error: dead at once
    jobs.always_fails.enqueue("x")  # retried, then dead
    drain()
    invalid = DeadLetter.objects.filter(job_name="tests.invalid")
    assert invalid.count() == 3 and len({e.fingerprint for e in invalid}) == 1
    assert invalid[0].raised_at == "testapp/jobs.py in invalid"
    exhausted = DeadLetter.objects.get(job_name="tests.always_fails")
    assert exhausted.fingerprint != invalid[0].fingerprint
    assert exhausted.first_failed_at < exhausted.created_at  # three attempts, first one earlier

    operator(client, "view_deadletter", "requeue_deadletter")
    page = client.get(GROUPS)
    groups = {g["name"]: g for g in page.context["groups"]}
    assert groups["tests.invalid"]["entries"] == 3 and groups["tests.invalid"]["open"] == 3
    assert groups["tests.invalid"]["exception_class"] == "tests.testapp.jobs.Invalid"
    assert groups["tests.always_fails"]["entries"] == 1
    body = page.content.decode()
    listing = f"{reverse('admin:django_jobs_deadletter_changelist')}?fingerprint={invalid[0].fingerprint}"
    assert listing in body
    response = client.get(listing)
    assert {e.job_name for e in response.context["cl"].result_list} == {"tests.invalid"}
    assert (
        "tests.invalid · tests.testapp.jobs.Invalid · testapp/jobs.py in invalid" in response.content.decode()
    )


@pytest.mark.django_db(transaction=True)
def test_requeue_this_group_confirms_then_requeues_only_that_group(client, redis_db):
    group = [record(args=[f"g{i}"], function="charge") for i in range(3)]
    other = record(args=["other"], function="refund")
    operator(client, "view_deadletter", "requeue_deadletter")
    body = client.get(GROUPS).content.decode()
    confirm = f"{reverse('admin:django_jobs_deadletter_requeue_matching')}?fingerprint={group[0].fingerprint}"
    assert confirm in body
    page = client.get(confirm)
    assert page.context["count"] == 3
    client.post(confirm, {"through": page.context["through"]})
    assert set(DeadLetter.objects.filter(status="requeued").values_list("pk", flat=True)) == {
        e.pk for e in group
    }
    assert DeadLetter.objects.get(pk=other.pk).status == "open"
    assert redis_db.llen("rq:queue:default") + redis_db.zcard("rq:scheduled:default") == 3


@pytest.mark.django_db(transaction=True)
def test_groups_follow_the_list_filters_and_hide_the_requeue_button_without_permission(client):
    record(args=["1"], queue="default", function="charge")
    record(args=["2"], queue="emails", function="charge")
    operator(client, "view_deadletter")
    page = client.get(GROUPS + "?queue__exact=emails")
    assert [g["entries"] for g in page.context["groups"]] == [1]
    assert "Requeue this group" not in page.content.decode()
    assert client.get(GROUPS + "?no_such_field=1").status_code == 302  # like the list: back with ?e=1


@pytest.mark.django_db(transaction=True)
def test_the_migration_backfills_groups_dates_and_links_of_older_entries():
    origin = record(args=["1"], function="charge")
    again = record(args=["1"], function="charge")
    DeadLetter.objects.filter(pk=origin.pk).update(requeued_job_id=again.job_id, status="requeued")
    DeadLetter.objects.update(fingerprint="", raised_at="", requeued_from=None)
    migration = importlib.import_module("django_jobs.migrations.0002_dashboard")
    from django.apps import apps

    with connection.schema_editor() as editor:
        migration.backfill(apps, editor)
    again.refresh_from_db()
    expected = triage(again.job_name, again.exception, traceback_text("charge"), [])
    assert (again.fingerprint, again.raised_at) == (expected.fingerprint, "shop/jobs.py in charge")
    assert again.requeued_from_id == origin.pk
