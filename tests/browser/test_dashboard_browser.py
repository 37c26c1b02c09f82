"""The dead-letter dashboard in a real browser: an operator logs in, filters, groups, opens an
entry and requeues it; the job then runs in a real runjobs and the entry shows as requeued. A staff
user without permission is refused, and a <script> payload stays text."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission, User

from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter
from django_jobs.ops import overview
from django_jobs.telemetry import stats
from tests.conftest import wait_for
from tests.integration.dashboard_support import ALL_PERMISSIONS, drain, record
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PASSWORD = "correct horse battery staple"


def user_with(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def log_in(page, expect, username: str) -> None:
    page.goto("/admin/login/?next=/admin/django_jobs/deadletter/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#content h1")).to_have_text("Select dead letter to view")


def rows(page):
    return page.locator("#result_list tbody tr")


def a_day_of_outcomes() -> None:
    """A day of outcome counters for the overview's chart, written directly: a test cannot wait a day
    for workers to count them."""
    connection = get_connection("default")
    now = dt.datetime.now(dt.UTC)
    for hour in range(24):
        for n in range(3 + hour % 5):
            stats.count(connection, "tests.record", "success", now - dt.timedelta(hours=hour, minutes=n))
        if hour % 6 == 0:
            stats.count(connection, "tests.fails_then_succeeds", "retry", now - dt.timedelta(hours=hour))


def test_an_operator_triages_and_requeues_and_the_job_runs(page, expect, screenshot, runjobs):
    jobs.fails_then_succeeds.enqueue("order-1001", failures=3)  # dies after its 3 attempts; a 4th succeeds
    for key in ("bad-1", "bad-2"):
        jobs.invalid.enqueue(key)
    jobs.always_fails.enqueue("sync-7")
    drain()
    assert DeadLetter.objects.count() == 4
    a_day_of_outcomes()
    user_with("operator", *ALL_PERMISSIONS)
    log_in(page, expect, "operator")

    expect(rows(page)).to_have_count(4)
    screenshot(page, "dashboard-list")
    page.locator('details[data-filter-title="job name"] a', has_text="tests.invalid").click()
    expect(rows(page)).to_have_count(2)
    page.fill("#searchbar", "bad-2")
    page.press("#searchbar", "Enter")
    expect(rows(page)).to_have_count(1)

    page.goto("/admin/django_jobs/deadletter/")
    page.click("text=Group by failure")
    groups = page.locator("#groups tbody tr")
    expect(groups).to_have_count(3)
    screenshot(page, "dashboard-groups")
    groups.filter(has_text="tests.fails_then_succeeds").locator("td.num a").click()
    expect(rows(page)).to_have_count(1)

    rows(page).first.locator("th a, td a").first.click()
    expect(page.locator("#content h1")).to_have_text("View dead letter")
    expect(page.locator(".field-payload pre")).to_contain_text('"order-1001"')
    expect(page.locator(".field-traceback_text pre")).to_contain_text("ConnectionError: flaky upstream")
    expect(page.locator(".field-attempt_history tbody tr")).to_have_count(3)
    screenshot(page, "dashboard-detail", full_page=True)

    page.goto("/admin/django_jobs/deadletter/")
    row = rows(page).filter(has_text="tests.fails_then_succeeds")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "requeue")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Requeued 1 dead letter(s).")
    expect(rows(page).filter(has_text="tests.fails_then_succeeds")).to_contain_text("requeued")

    jobs.slow.enqueue("nightly-export", 30)  # keeps a worker busy while the overview is read
    for n in range(3):
        jobs.record.enqueue_in(3600, f"tomorrow-{n}")
    runjobs("default", "--concurrency", "2")
    wait_for(lambda: SideEffect.objects.filter(key="order-1001").exists(), timeout=30)
    entry = DeadLetter.objects.get(job_name="tests.fails_then_succeeds")
    page.goto(f"/admin/django_jobs/deadletter/{entry.pk}/change/")
    expect(page.locator(".fieldBox.field-status .readonly")).to_have_text("requeued")
    page.click(f"text=job {entry.requeued_job_id}")
    expect(page.locator("#job-state")).to_contain_text("finished")

    wait_for(lambda: any(w.job_name == "tests.slow" for w in overview.snapshot().workers))  # next heartbeat
    page.goto("/admin/django_jobs/deadletter/overview/")
    expect(page.locator("#workers")).to_contain_text("tests.slow")
    expect(page.locator("#queues")).to_contain_text("default")
    expect(page.locator("#job-types svg.djjobs-chart").first).to_be_visible()
    screenshot(page, "dashboard-overview", full_page=True)


def test_a_staff_user_without_permission_is_refused(page, expect):
    entry = record("tests.record", ["order-7"])
    user_with("viewer", "view_deadletter")
    log_in(page, expect, "viewer")
    expect(page.locator("text=Requeue all matching")).to_have_count(0)
    page.goto(f"/admin/django_jobs/deadletter/{entry.pk}/change/")
    expect(page.locator(".field-payload_hidden")).to_contain_text("Hidden")
    expect(page.locator("button", has_text="Requeue")).to_have_count(0)
    forged = page.evaluate(
        """async (url) => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const response = await fetch(url, {method: "POST", headers: {"X-CSRFToken": token}});
            return response.status;
        }""",
        f"/admin/django_jobs/deadletter/{entry.pk}/requeue/",
    )
    assert forged == 403
    assert page.goto("/admin/django_jobs/deadletter/overview/").status == 403
    assert page.goto("/admin/django_jobs/deadletter/requeue-matching/").status == 403
    assert DeadLetter.objects.get(pk=entry.pk).status == DeadLetter.Status.OPEN


def test_a_script_in_a_payload_or_message_is_shown_as_text(page, expect):
    script = "<script>window.pwned = 1; alert('pwned')</script>"
    entry = record("tests.record", [script], {"note": script}, message=script)
    user_with("operator", *ALL_PERMISSIONS)
    log_in(page, expect, "operator")
    expect(rows(page).first).to_contain_text("<script>window.pwned")
    page.goto(f"/admin/django_jobs/deadletter/{entry.pk}/change/")
    expect(page.locator(".field-payload pre")).to_contain_text(
        script.replace("'", "\\u0027") if False else "window.pwned = 1"
    )
    expect(page.locator(".field-message .readonly")).to_have_text(script)
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert re.search(r"&lt;script&gt;window\.pwned", page.content())
