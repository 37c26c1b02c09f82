"""The job browser in Chromium: every state group listed, paging, a bulk action with and without
its permission, the live view and its pause, and no sideways scrolling at 1280 and 1440 px with
Django's sidebar open. ``JOBS_SCREENSHOTS=docs`` keeps the screenshots the docs show."""

from __future__ import annotations

import time

import pytest

from django_jobs import get_job
from django_jobs.core import execution, registry
from django_jobs.exceptions import PermanentError
from django_jobs.store import Store
from django_jobs.store.lifecycle import State
from django_jobs.testing import run_jobs
from tests.browser.test_dashboard_browser import log_in, user_with
from tests.browser.test_layout_browser import MEASURE
from tests.integration.dashboard_support import ALL_PERMISSIONS
from tests.integration.test_why import rq_failed
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True, databases="__all__"), pytest.mark.browser]

URL = "/admin/django_jobs/job/"


def claim(store: Store, nonce: str, paused: tuple[str, ...] = (), lease: float = 30):
    return store.complete_and_claim(
        ["default"], finished=None, worker_name="host-a.4242", lease_seconds=lease, nonce=nonce,
        finished_ttl=60, limits=registry.limits_json(paused),
    ).claimed  # fmt: skip


def a_busy_queue(redis_db) -> dict[str, list[str]]:
    """Jobs in most states, with the long names real projects have."""
    store = Store.of(redis_db)
    running = jobs.per_account.enqueue("account-17", "first").id
    claim(store, "n1")
    jobs.per_account.enqueue("account-17", "second")
    claim(store, "n2")  # over its key's limit: in its key's line
    store.pause("job", "tests.always_fails", by="ada", reason="")
    jobs.always_fails.enqueue("held back")
    claim(store, "n3", paused=("tests.always_fails",))  # its type paused: parked
    rq_failed(store)  # an rqworker took one and failed it
    jobs.permanent.enqueue("dying")
    execution.settle_failure(store, claim(store, "n4"), PermanentError("voided"))  # its dead letter unwritten
    jobs.record.enqueue("lost")
    claim(store, "n5", lease=0.01)
    time.sleep(0.05)
    store.maintain(["default"], registry.limits_json())  # its lease expired: lost
    ready = [jobs.record.enqueue(f"invoice-{n}").id for n in range(60)]
    jobs.record.options(priority=10).enqueue("urgent")
    jobs.always_fails.options(delay=600).enqueue("later")
    jobs.permanent.enqueue("dead")
    run_jobs(limit=1)  # the urgent one: into the history
    return {"running": [running], "ready": ready}


@pytest.fixture
def operator_page(page, expect):
    user_with("operator", *ALL_PERMISSIONS)
    log_in(page, expect, "operator")
    expect(page.locator("#nav-sidebar")).to_be_visible()
    return page


@pytest.mark.parametrize("width", [1280, 1440])
def test_every_tab_lists_its_jobs_and_fits_with_the_sidebar_open(
    operator_page, expect, screenshot, redis_db, width
):
    a_busy_queue(redis_db)
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(URL)
    expect(page.locator("#job-tabs")).to_contain_text("ready (61)")
    screenshot(page, f"job-browser-{width}")
    for tab, says in (("running", "running"), ("in_line", "parked in its key's line"),
                      ("parked", "parked by a paused type"), ("foreign", "failed by a foreign worker"),
                      ("lost", "lost"), ("dying", "dying"),
                      ("scheduled", "scheduled"), ("history", "finished")):  # fmt: skip
        page.click(f"#job-tabs a[href*='tab={tab}']")
        expect(page.locator("#job-list tbody")).to_contain_text(says)
        sizes = page.evaluate(MEASURE, "#job-list")
        assert sizes["pageOverflow"] <= 0, (tab, sizes)
    page.click("#job-list tbody a")  # its job page, with why
    expect(page.locator("#job-why")).to_contain_text("Why: finished at")


def test_pages_follow_one_another(operator_page, expect, redis_db):
    ids = a_busy_queue(redis_db)["ready"]
    page = operator_page
    page.goto(URL)
    expect(page.locator("#job-range")).to_have_text("Jobs 1 to 50 of 61")
    page.click("#job-pages a:has-text('next')")
    expect(page.locator("#job-range")).to_have_text("Jobs 51 to 61 of 61")
    expect(page.locator(f"#job-list code:text('{ids[-1]}')")).to_be_visible()


def test_a_bulk_cancel_from_the_list_is_confirmed_then_done(operator_page, expect, redis_db):
    ids = a_busy_queue(redis_db)["ready"]
    page = operator_page
    page.goto(URL)
    page.check(f"input[name=ids][value='{ids[0]}']")
    page.check(f"input[name=ids][value='{ids[1]}']")
    page.select_option("#bulk-action", "cancel")
    page.click("#job-bulk input[type=submit]")
    expect(page.locator("#bulk-summary")).to_contain_text("Cancel: 2 jobs of queue default")
    page.click("#content-main form input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Cancel, 2 job(s): 2 cancelled.")
    assert {get_job(job_id).state for job_id in ids[:2]} == {State.CANCELLED}


def test_without_an_action_permission_there_is_nothing_to_tick(page, expect, redis_db):
    a_busy_queue(redis_db)
    user_with("viewer", "view_deadletter")
    log_in(page, expect, "viewer")
    page.goto(URL)
    expect(page.locator("#job-list tbody tr")).to_have_count(50)
    expect(page.locator("input[name=ids]")).to_have_count(0)
    expect(page.locator("#bulk-action")).to_have_count(0)


def test_the_live_view_refreshes_the_list_in_place_until_paused(operator_page, expect, redis_db):
    page = operator_page
    page.goto(URL)
    page.evaluate("window.notReloaded = true")
    expect(page.locator("#job-tabs")).to_contain_text("ready (0)")
    jobs.record.enqueue("arrives")
    expect(page.locator("#job-tabs")).to_contain_text("ready (1)", timeout=12_000)
    assert page.evaluate("window.notReloaded") is True  # swapped in, not reloaded
    page.click("#live-toggle")
    expect(page.locator("#live-status")).to_have_text("Live view paused.")
    jobs.record.enqueue("unseen")
    page.wait_for_timeout(6_000)
    expect(page.locator("#job-tabs")).to_contain_text("ready (1)")
    page.click("#live-toggle")
    expect(page.locator("#job-tabs")).to_contain_text("ready (2)", timeout=12_000)


def test_a_search_by_argument_then_retry_now_on_the_scheduled_tab(operator_page, expect, redis_db):
    later = jobs.record.options(delay=600).enqueue("account-17").id
    jobs.record.options(delay=600).enqueue("account-18")
    page = operator_page
    page.goto(URL + "?tab=scheduled")
    page.fill("#search-arg", "account-17")
    page.click("#job-filters input[type=submit]")
    expect(page.locator("#job-searched")).to_contain_text("1 match among every job of this tab.")
    expect(page.locator("#job-list tbody tr")).to_have_count(1)
    page.check(f"input[name=ids][value='{later}']")
    page.select_option("#bulk-action", "retry")
    page.click("#job-bulk input[type=submit]")
    page.click("#content-main form input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Retry now, 1 job(s): 1 started.")
    assert get_job(later).state is State.WAITING
