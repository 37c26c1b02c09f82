"""The dead-letter list at scale: a constant number of queries however many entries exist, one
COUNT per page, index-backed filters; and the filters, date hierarchy and search do what they say."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_jobs.models import DeadLetter
from tests.integration.dashboard_support import operator, record

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:django_jobs_deadletter_changelist")
JOBS = ["shop.charge", "shop.mail", "shop.export", "shop.sync"]
EXCEPTIONS = ["builtins.ValueError", "builtins.ConnectionError", "builtins.KeyError"]


def bulk(start: int, stop: int) -> None:
    """Entries with every column filled, spread over jobs, exceptions, queues, statuses and days."""
    now = timezone.now()
    DeadLetter.objects.bulk_create(
        [
            DeadLetter(
                job_id=f"bulk-{i}",
                job_name=JOBS[i % 4],
                queue=("default", "emails")[i % 2],
                args=[i, f"order-{i}"],
                kwargs={"note": "x" * 200},
                exception=EXCEPTIONS[i % 3],
                message=f"failure number {i} " + "y" * 300,
                traceback="Traceback (most recent call last):\n" + "  frame\n" * 200,
                history=[
                    {"attempt": n, "at": now.isoformat(), "exception": "E", "message": "m"} for n in (1, 2, 3)
                ],
                raised_at="shop/jobs.py in run",
                fingerprint=f"fp{i % 12:02d}",
                attempts=3,
                reason=DeadLetter.Reason.EXHAUSTED,
                status=(DeadLetter.Status.OPEN, DeadLetter.Status.REQUEUED)[i % 5 == 0],
                first_failed_at=now - dt.timedelta(days=i % 40, minutes=5),
                created_at=now - dt.timedelta(days=i % 40),
            )
            for i in range(start, stop)
        ],
        batch_size=500,
    )


def queries_of(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return [q["sql"] for q in captured.captured_queries]


URLS = [
    CHANGELIST,
    CHANGELIST + "?status__exact=open&queue__exact=emails",
    CHANGELIST + "?q=order-7&job_name__exact=shop.mail",
    CHANGELIST + f"?created_at__year={timezone.now().year}&p=2",
    CHANGELIST + "?o=-6",  # sorted by first failure
]


@pytest.mark.parametrize("url", URLS)
def test_the_list_costs_the_same_queries_for_20_or_2000_entries_and_counts_once(client, url):
    operator(client, "view_deadletter", "view_deadletter_payload")
    bulk(0, 120)
    small = queries_of(client, url)
    bulk(120, 2000)
    large = queries_of(client, url)
    assert len(large) == len(small), "\n".join(large)
    counts = [sql for sql in large if re.search(r"\bCOUNT\(", sql, re.IGNORECASE)]
    assert len(counts) == 1, counts  # the paginator's, and no second full-table count
    columns = next(sql.split(" FROM ")[0] for sql in large if '"django_jobs_deadletter"."job_id"' in sql)
    for heavy in ("traceback", "history", "raw", "kwargs"):  # never loaded for a list page
        assert f'"django_jobs_deadletter"."{heavy}"' not in columns


def test_the_filters_are_backed_by_indexes():
    indexed = {
        tuple(info["columns"])
        for info in connection.introspection.get_constraints(
            connection.cursor(), DeadLetter._meta.db_table
        ).values()
        if info["index"] or info["unique"]
    }
    for columns in [("status", "created_at"), ("job_name",), ("exception",), ("fingerprint",), ("queue",),
                    ("created_at",), ("job_id",), ("requeued_job_id",)]:  # fmt: skip
        assert columns in indexed, columns


def shown(client, query: str) -> set[str]:
    response = client.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 200
    return {entry.job_id for entry in response.context["cl"].result_list}


def test_filters_date_hierarchy_and_search(client):
    operator(client, "view_deadletter", "view_deadletter_payload")
    now = timezone.now()
    charge = record(
        "tests.record", ["order-17"], exception="builtins.ValueError", message="card declined", job_id="c1"
    )
    mail = record(
        "tests.invalid", ["a@example.com"], exception="builtins.KeyError", queue="emails", job_id="m1"
    )
    old = record("tests.record", ["order-3"], exception="builtins.ValueError", job_id="o1")
    DeadLetter.objects.filter(pk=old.pk).update(created_at=now - dt.timedelta(days=400))
    DeadLetter.objects.filter(pk=mail.pk).update(status=DeadLetter.Status.DISCARDED)

    assert shown(client, "job_name__exact=tests.record") == {"c1", "o1"}
    assert shown(client, "exception__exact=builtins.KeyError") == {"m1"}
    assert shown(client, "queue__exact=emails") == {"m1"}
    assert shown(client, "status__exact=open") == {"c1", "o1"}
    assert shown(client, f"fingerprint={charge.fingerprint}") == {"c1", "o1"}
    assert shown(client, f"created_at__year={now.year}&created_at__month={now.month}") == {"c1", "m1"}
    assert shown(client, "q=declined") == {"c1"}  # message
    assert shown(client, "q=example.com") == {"m1"}  # arguments
    assert shown(client, "q=c1") == {"c1"}  # job id
    assert shown(client, 'q="card declined" order-17') == {"c1"}  # every word, phrases quoted


def test_the_list_shows_the_columns_an_operator_triages_by(client):
    operator(client, "view_deadletter")
    entry = record(message="upstream said no " + "z" * 500)
    body = client.get(CHANGELIST).content.decode()
    for column in ("Failure", "Attempts", "Last failure", "Status"):  # job, queue, exception, message in one
        assert column in body, column

    def dotted(name: str) -> str:  # a dotted name may break at its dots, never mid-word
        return name.replace(".", ".<wbr>")

    job = f'<span class="djjobs-job">{dotted(entry.job_name)}</span> <span class="djjobs-muted">on default'
    assert job in body
    assert dotted(entry.exception) in body and "upstream said no" in body and "z" * 200 not in body
    assert 'djjobs-first">first ' in body  # the first failure, under the last
