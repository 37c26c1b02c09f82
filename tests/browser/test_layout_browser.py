"""The dashboard laid out for a laptop: at 1280 and 1440 px wide, with Django's navigation sidebar
open (its default), the list's columns, the groups table and its buttons fit without sideways scrolling."""

from __future__ import annotations

import pytest

from tests.browser.test_dashboard_browser import log_in, user_with
from tests.integration.dashboard_support import ALL_PERMISSIONS, record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.browser]

#: What real failures look like: long dotted names and a message that runs on.
FAILURES = [
    ("billing.send_invoice_reminder", "requests.exceptions.ConnectionError",
     "HTTPSConnectionPool(host='api.payments.example.com', port=443): Max retries exceeded with url: "
     "/v2/invoices/90210/reminders (Caused by NewConnectionError('Failed to establish a new connection'))",
     "send_reminder"),
    ("partners.push_order_to_warehouse", "django.core.exceptions.ValidationError",
     "['Enter a valid postal code for the destination country of order 1001.']", "push_order"),
    ("shop.sync_catalog_page", "tests.testapp.jobs.Invalid", "bad input", "sync_page"),
]  # fmt: skip

#: Overflow of an element (scrollWidth beyond its box), and how far right its last cell reaches.
MEASURE = """(selector) => {
    const box = document.querySelector(selector);
    const page = document.documentElement;
    return {overflow: box.scrollWidth - box.clientWidth, pageOverflow: page.scrollWidth - page.clientWidth,
            viewport: page.clientWidth};
}"""


def right_edge(locator) -> float:
    box = locator.bounding_box()
    assert box is not None
    return box["x"] + box["width"]


@pytest.fixture
def operator_page(page, expect):
    for job_name, exception, message, function in FAILURES:
        for _ in range(2):
            record(job_name, exception=exception, message=message, function=function)
    user_with("operator", *ALL_PERMISSIONS)
    log_in(page, expect, "operator")
    expect(page.locator("#nav-sidebar")).to_be_visible()  # the default: sidebar open
    return page


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_list_fits_with_the_sidebar_open(operator_page, expect, screenshot, width):
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/django_jobs/deadletter/")
    screenshot(page, f"layout-list-{width}")
    sizes = page.evaluate(MEASURE, "#changelist .results")
    assert sizes["overflow"] <= 0 and sizes["pageOverflow"] <= 0, sizes
    status = page.locator("#result_list thead th.column-status")
    assert right_edge(status) <= sizes["viewport"]
    message = page.locator("#result_list tbody .djjobs-message").first
    assert message.bounding_box()["width"] >= 200  # a readable column, not one word per line


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_groups_page_fits_with_the_sidebar_open(operator_page, expect, screenshot, width):
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/django_jobs/deadletter/groups/")
    expect(page.locator("#groups tbody tr")).to_have_count(3)
    screenshot(page, f"layout-groups-{width}")
    sizes = page.evaluate(MEASURE, "#groups")
    assert sizes["pageOverflow"] <= 0, sizes
    for button in page.locator("#groups a.button").all():
        assert right_edge(button) <= sizes["viewport"]


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_overview_with_its_pause_buttons_fits_with_the_sidebar_open(operator_page, screenshot, width):
    from django_jobs import pause

    pause(queue="emails", reason="the mail provider is down")
    pause(job="tests.record", reason="a bad deploy of the partner integration")
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/django_jobs/deadletter/overview/")
    screenshot(page, f"layout-overview-{width}")
    sizes = page.evaluate(MEASURE, "#job-types")
    assert sizes["pageOverflow"] <= 0, sizes
    for button in page.locator("#queues input[type=submit], #pauses input[type=submit]").all():
        assert right_edge(button) <= sizes["viewport"]


#: Where a line of an element's text breaks between two letters or digits: a word cut in two.
MID_WORD = """(selector) => {
    const cuts = [];
    for (const element of document.querySelectorAll(selector)) {
        const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
        const chars = [];
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            for (let i = 0; i < node.length; i++) {
                const range = document.createRange();
                range.setStart(node, i);
                range.setEnd(node, i + 1);
                chars.push([node.data[i], range.getBoundingClientRect().top]);
            }
        }
        for (let i = 1; i < chars.length; i++) {
            if (chars[i][1] > chars[i - 1][1] + 2 && /\\w/.test(chars[i - 1][0]) && /\\w/.test(chars[i][0])) {
                cuts.push(element.textContent.trim());
            }
        }
    }
    return cuts;
}"""


@pytest.mark.parametrize("width", [1280, 1440])
@pytest.mark.parametrize("where", ["/admin/django_jobs/deadletter/", "/admin/django_jobs/deadletter/groups/"])
def test_job_names_and_exception_classes_break_at_their_dots_never_mid_word(operator_page, where, width):
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(where)
    assert page.locator(".djjobs-exception").count() >= 3
    assert page.evaluate(MID_WORD, ".djjobs-exception, .djjobs-job") == []


@pytest.mark.parametrize("width", [1280, 1440])
def test_a_dead_letters_attempt_history_fits_its_page(operator_page, screenshot, width):
    from django_jobs.models import DeadLetter

    entry = DeadLetter.objects.filter(exception__startswith="requests.").first()
    page = operator_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/admin/django_jobs/deadletter/{entry.pk}/change/")
    screenshot(page, f"layout-dead-letter-{width}", full_page=True)
    sizes = page.evaluate(MEASURE, ".field-attempt_history table")
    assert sizes["pageOverflow"] <= 0, sizes
    history = page.locator(".field-attempt_history table")
    fieldset = page.locator("fieldset", has=history)
    assert right_edge(history) <= right_edge(fieldset)  # the message column is not cut off
    assert page.evaluate(MID_WORD, ".field-attempt_history td") == []


@pytest.mark.parametrize("width", [1280, 1440])
def test_the_chains_list_fits_without_scrolling_inside_itself(page, expect, screenshot, width):
    from django_jobs.models import Chain

    for n in range(3):
        Chain.objects.create(
            name=f"warehouse.export_orders_to_partner_{n}", cursor={"after": 1000 + n, "region": "eu-west"},
            pages_done=120, items_done=60_000, last_error="requests.exceptions.ReadTimeout: the partner API "
            "did not answer within 30 s (https://api.partner.example.com/v3/orders/export)",
        )  # fmt: skip
    user_with("chains", "view_chain", "view_deadletter")
    log_in(page, expect, "chains")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/admin/django_jobs/chain/")
    screenshot(page, f"layout-chains-{width}")
    sizes = page.evaluate(MEASURE, "#changelist .results")
    assert sizes["overflow"] <= 0 and sizes["pageOverflow"] <= 0, sizes
    for chain in page.locator("#result_list tbody .field-chain a").all():
        assert chain.bounding_box()["height"] < 70  # a name and a short id: three lines, not an id over four
