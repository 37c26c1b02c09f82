"""The batches' admin in a real browser: an operator follows a batch from its progress to the dead
letter that holds it back, requeues it, reconciles the batch and sees its callbacks ran; a staff
user without the permission is refused."""

from __future__ import annotations

import pytest

from django_jobs.models import BatchMember
from tests.browser.test_dashboard_browser import PASSWORD, user_with
from tests.integration.dashboard_support import ALL_PERMISSIONS
from tests.integration.test_batch_admin import a_batch_with_one_of_each
from tests.integration.test_batches import drain
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True, databases=["default", "other"]), pytest.mark.browser]


def log_in(page, expect, username: str) -> None:
    page.goto("/admin/login/?next=/admin/django_jobs/batch/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")


def test_an_operator_follows_a_batch_to_its_dead_letter_and_sees_it_complete(page, expect, screenshot):
    a_batch_with_one_of_each()
    user_with("operator", *ALL_PERMISSIONS, "view_batch", "change_batch")
    log_in(page, expect, "operator")
    expect(page.locator("#content h1")).to_have_text("Select batch to view")
    row = page.locator("#result_list tbody tr").filter(has_text="monthly export")
    expect(row).to_contain_text("2 / 3")
    expect(row).to_contain_text("1 succeeded · 1 ended · 1 pending")
    expect(row).to_contain_text("on_success: pending, on_complete: pending")
    screenshot(page, "batches-list")

    row.locator("th a").click()
    expect(page.locator("#content h1")).to_have_text("View batch")
    members = page.locator("#batch-members tbody tr")
    expect(members).to_have_count(2)  # the dead-lettered member and the waiting one
    screenshot(page, "batch-detail", full_page=True)
    members.filter(has_text="dead-lettered").locator("a", has_text="dead letter").click()
    expect(page.locator("#content h1")).to_have_text("View dead letter")

    SideEffect.objects.create(key="fixed:broken")  # the fix, then Requeue on the dead letter's page
    page.locator("button", has_text="Requeue").click()
    expect(page.locator(".messagelist")).to_contain_text("Requeued 1 dead letter(s).")
    later = BatchMember.objects.get(job_name="tests.record", state="pending")
    page.goto(f"/admin/django_jobs/deadletter/job/{later.job_id}/")
    page.locator("input[value='Retry now']").click()  # the waiting member, now
    drain()

    page.goto("/admin/django_jobs/batch/")
    row = page.locator("#result_list tbody tr").filter(has_text="monthly export")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "reconcile")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Reconciled 1 open batch(es): 1 member(s) settled.")
    drain()  # the callbacks the reconcile enqueued
    page.reload()
    row = page.locator("#result_list tbody tr").filter(has_text="monthly export")
    expect(row).to_contain_text("succeeded")
    expect(row).to_contain_text("on_success: ran, on_complete: ran")


def test_a_staff_user_without_the_permission_is_refused(page, expect):
    created, _ = a_batch_with_one_of_each()
    user_with("viewer", "view_deadletter")
    log_in(page, expect, "viewer")
    assert page.goto("/admin/django_jobs/batch/").status == 403
    assert page.goto(f"/admin/django_jobs/batch/{created.pk}/change/").status == 403
