"""The admin as a new user first meets it: one date format everywhere, and a chain page that only views."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_jobs.models import Chain, DeadLetter
from tests.integration.dashboard_support import record
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

FIRST = dt.datetime(2026, 1, 2, 13, 4, tzinfo=dt.UTC)
LAST = FIRST + dt.timedelta(hours=1)
#: Both in Asia/Kolkata (UTC+5:30), in Django's default English DATETIME_FORMAT, with the zone.
SHOWN_FIRST, SHOWN_LAST = "Jan. 2, 2026, 6:34 p.m. IST", "Jan. 2, 2026, 7:34 p.m. IST"


@pytest.fixture
def entry(settings):
    settings.TIME_ZONE = "Asia/Kolkata"
    found = record(attempts=2)
    history = [{**item, "at": FIRST.isoformat()} for item in found.history]
    DeadLetter.objects.filter(pk=found.pk).update(created_at=LAST, first_failed_at=FIRST, history=history)
    return found


@pytest.mark.parametrize(
    ("view", "firsts"),
    [
        ("admin:django_jobs_deadletter_changelist", 1),
        ("admin:django_jobs_deadletter_groups", 1),
        ("admin:django_jobs_deadletter_change", 3),  # the first failure and both attempts
    ],
)
def test_dates_are_shown_one_way_on_every_page_with_the_time_zone(admin_client, entry, view, firsts):
    args = [entry.pk] if view.endswith("_change") else []
    page = admin_client.get(reverse(view, args=args)).content.decode()
    assert page.count(SHOWN_FIRST) == firsts and page.count(SHOWN_LAST) == 1, page
    for other in ("2026-01-02", "13:04", "14:04", "18:34", "19:34"):  # ISO, UTC, 24-hour local
        assert other not in page


def test_an_unreadable_time_is_shown_as_it_is(admin_client, settings):
    found = record(attempts=1)
    DeadLetter.objects.filter(pk=found.pk).update(history=[{"attempt": 1, "at": "yesterday-ish"}])
    page = admin_client.get(reverse("admin:django_jobs_deadletter_change", args=[found.pk])).content.decode()
    assert '<td class="nowrap">yesterday-ish</td>' in page


# --- a chain's page -------------------------------------------------------------------------------


def staff(client, *codenames):
    user = User.objects.create_user("op", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def test_a_chains_page_is_a_view_page_without_save_buttons(admin_client):
    chain = jobs.sync_items.start(page_size=10)
    page = admin_client.get(reverse("admin:django_jobs_chain_change", args=[chain.pk])).content.decode()
    assert "<h1>View chain</h1>" in page and "Change chain" not in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    listing = admin_client.get(reverse("admin:django_jobs_chain_changelist")).content.decode()
    assert 'value="pause"' in listing


def test_pausing_a_chain_still_needs_and_takes_the_change_permission(client):
    chain = jobs.sync_items.start(page_size=10)
    url = reverse("admin:django_jobs_chain_changelist")
    staff(client, "view_chain")
    assert 'value="pause"' not in client.get(url).content.decode()
    client.post(url, {"action": "pause", "_selected_action": [chain.pk]})
    assert Chain.objects.get(pk=chain.pk).status == Chain.Status.RUNNING
    User.objects.get(username="op").user_permissions.add(Permission.objects.get(codename="change_chain"))
    assert 'value="pause"' in client.get(url).content.decode()
    client.post(url, {"action": "pause", "_selected_action": [chain.pk]})
    assert Chain.objects.get(pk=chain.pk).status == Chain.Status.PAUSED
