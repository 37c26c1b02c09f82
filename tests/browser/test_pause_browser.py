"""Pausing from the queue overview in a real browser: an operator pauses a job type while a real
runjobs serves its queue, sees its jobs held with the reason given, resumes it and the jobs run; a
staff user without the permission sees no button and a forged POST is refused."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry

from django_jobs import paused
from tests.browser.test_dashboard_browser import user_with
from tests.conftest import wait_for
from tests.integration.dashboard_support import ALL_PERMISSIONS
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

PASSWORD = "correct horse battery staple"
OVERVIEW = "/admin/django_jobs/deadletter/overview/"


def log_in(page, expect, username: str) -> None:
    page.goto(f"/admin/login/?next={OVERVIEW}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#content h1")).to_have_text("Queue overview")


def ran(*keys: str) -> int:
    return SideEffect.objects.filter(key__in=keys).count()


def test_an_operator_pauses_a_job_type_sees_its_jobs_held_and_resumes_it(page, expect, screenshot, runjobs):
    user_with("operator", *ALL_PERMISSIONS)
    worker = runjobs("default", extra_env={"JOBS_TEST_LOG": "INFO"})
    log_in(page, expect, "operator")
    row = page.locator("#job-types tbody tr").filter(has_text="tests.record").first
    row.locator("summary", has_text="pause…").click()
    row.locator("input[name=reason]").fill("the partner API is down")
    row.locator("input[value=Pause]").click()
    expect(page.locator(".messagelist")).to_contain_text("Job type tests.record is paused")
    expect(page.locator("#pauses")).to_contain_text("the partner API is down")

    wait_for(lambda: "Job tests.record is paused" in worker.output())
    for n in range(2):
        jobs.record.enqueue(f"held-{n}")
    jobs.greet.enqueue("runs")
    wait_for(lambda: ran("hello:runs") == 1)
    assert ran("held-0", "held-1") == 0
    page.reload()
    expect(page.locator("#pauses tbody tr").first).to_contain_text("tests.record")
    expect(page.locator("#pauses tbody tr td.num").first).to_have_text("2")
    screenshot(page, "overview-paused", full_page=True)

    page.locator("#pauses input[value=Resume]").click()
    expect(page.locator(".messagelist")).to_contain_text("2 held job(s) are back at the head of their queue")
    wait_for(lambda: ran("held-0", "held-1") == 2)
    assert paused() == []
    assert [e.change_message for e in LogEntry.objects.order_by("pk")] == [
        "Paused: the partner API is down",
        "Resumed (2 held job(s) back on their queue).",
    ]


def test_without_the_permission_there_is_no_button_and_a_forged_post_is_refused(page, expect):
    user_with("viewer", "view_deadletter", "view_queue_overview")
    log_in(page, expect, "viewer")
    expect(page.locator("input[value=Pause]")).to_have_count(0)
    forged = page.evaluate(
        """async (url) => {
            const token = document.cookie.match(/csrftoken=([^;]+)/)[1];
            const body = new URLSearchParams({kind: "queue", name: "default"});
            const response = await fetch(url, {method: "POST", headers: {"X-CSRFToken": token}, body});
            return response.status;
        }""",
        f"{OVERVIEW}pause/",
    )
    assert forged == 403
    assert paused() == []
