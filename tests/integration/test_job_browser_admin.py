"""The job browser in the admin: its own entry in the admin index, a tab per group of states with
its count, a page of one structure at a time, every job id linked to its page."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from django_jobs import get_job
from django_jobs.store import Store
from django_jobs.store.lifecycle import State, Status
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.integration.dashboard_support import operator
from tests.integration.test_job_browser import claim
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")

URL = reverse("admin:django_jobs_job_changelist")


def ids_on(html: str) -> list[str]:
    return re.findall(r'<td><a href="/admin/django_jobs/deadletter/job/([^/]+)/"><code>', html)


def test_the_browser_has_its_own_entry_in_the_admin_index(client, redis_db):
    operator(client, "view_deadletter")
    index = client.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' in index and ">Jobs<" in index


def test_each_tab_counts_its_jobs_and_lists_them_linked_to_their_pages(client, redis_db):
    store = Store.of(redis_db)
    running = jobs.record.enqueue("running").id
    assert claim(store, "n") is not None
    waiting = [jobs.record.enqueue(f"w{n}").id for n in range(3)]
    later = jobs.record.options(delay=600).enqueue("later").id
    operator(client, "view_deadletter")
    html = client.get(URL).content.decode()
    assert "ready (3)" in html and "scheduled (1)" in html and "running (1)" in html
    assert ids_on(html) == waiting
    html = client.get(URL + "?queue=default&tab=scheduled").content.decode()
    assert ids_on(html) == [later] and "due 20" in html
    html = client.get(URL + "?queue=default&tab=running").content.decode()
    assert ids_on(html) == [running] and "on host.1, attempt 1" in html
    assert client.get(reverse("admin:django_jobs_deadletter_job", args=[running])).status_code == 200


def test_pages_follow_one_another(client, redis_db):
    ids = [jobs.record.enqueue(f"r{n}").id for n in range(120)]
    operator(client, "view_deadletter")
    first = client.get(URL).content.decode()
    assert ids_on(first) == ids[:50] and "Jobs 1 to 50 of 120" in first
    second = client.get(URL + "?queue=default&tab=ready&start=50").content.decode()
    assert ids_on(second) == ids[50:100] and "?queue=default&amp;tab=ready&amp;start=0" in second
    last = client.get(URL + "?queue=default&tab=ready&start=100").content.decode()
    assert ids_on(last) == ids[100:] and "next &rsaquo;" not in last


def test_a_keys_value_is_shown_only_with_the_payload_permission(client, redis_db):
    store = Store.of(redis_db)
    jobs.per_account.enqueue("tenant-7", "first")
    assert claim(store, "n1") is not None
    jobs.per_account.enqueue("tenant-7", "second")
    assert claim(store, "n2") is None
    operator(client, "view_deadletter")
    html = client.get(URL + "?tab=in_line").content.decode()
    assert "behind its key, 0 ahead" in html and "tenant-7" not in html
    operator(client, "view_deadletter", "view_deadletter_payload", username="payload-op")
    assert "behind tenant-7, 0 ahead" in client.get(URL + "?tab=in_line").content.decode()


def test_bad_query_values_fall_back_and_say_so(client, redis_db):
    operator(client, "view_deadletter")
    html = client.get(URL + "?queue=nope&tab=nope&start=-1").content.decode()
    assert "No queue &#x27;nope&#x27; in RQ_QUEUES." in html and "No tab &#x27;nope&#x27;" in html
    assert "start must be a whole number" in html and "ready (0)" in html


def test_without_the_view_permission_the_browser_is_refused(client, redis_db):
    operator(client)
    assert client.get(URL).status_code == 403
    index = client.get(reverse("admin:index")).content.decode()
    assert f'href="{URL}"' not in index


def test_the_overviews_counts_link_to_the_browser_and_a_running_job_to_its_page(client, redis_db, runjobs):
    jobs.record.options(queue="emails").enqueue("waiting")
    runjobs("default", "--concurrency", "1")
    busy = jobs.polite.enqueue("busy", 10).id  # running across a heartbeat, which records it
    operator(client, "view_deadletter", "view_queue_overview")
    overview = reverse("admin:django_jobs_overview")
    job_link = f'href="{reverse("admin:django_jobs_deadletter_job", args=[busy])}"'
    html = wait_for(lambda: (page := client.get(overview).content.decode()) and job_link in page and page)
    assert f'href="{URL}?queue=emails&amp;tab=ready">1</a>' in html
    for tab in ("running", "scheduled", "in_line", "parked"):
        assert f'href="{URL}?queue=default&amp;tab={tab}">' in html


def test_the_history_tab_and_the_job_page_show_jobs_redis_let_go(client, redis_db):
    done = [jobs.record.enqueue(f"d{n}").id for n in range(3)]
    dead = jobs.permanent.enqueue("dead").id
    run_jobs()
    redis_db.flushdb()  # past FINISHED_TTL
    operator(client, "view_deadletter")
    html = client.get(URL + "?tab=history").content.decode()
    assert "history (4)" in html and sorted(ids_on(html)) == sorted([*done, dead])
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[dead])).content.decode()
    assert (
        "(from the history: Redis let its record go)" in page
        and "django_jobs.exceptions.PermanentError" in page
    )
    assert "dead-lettered at " in page  # why: its dead letter
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[done[0]])).content.decode()
    assert "after 1 attempt: it ran to success" in page


BULK = reverse("admin:django_jobs_job_bulk")


def test_a_bulk_cancel_asks_for_confirmation_then_cancels_each_job_by_its_own_transition(client, redis_db):
    waiting = [jobs.record.enqueue(f"w{n}").id for n in range(2)]
    done = jobs.record.enqueue("done").id
    run_jobs(limit=1)  # the first waiting one ran
    operator(client, "view_deadletter", "cancel_job")
    form = {"action": "cancel", "queue": "default", "tab": "ready", "ids": [*waiting, done]}
    page = client.post(BULK, form).content.decode()
    assert "Cancel: 3 jobs of queue default" in page and page.count('name="ids"') == 3
    assert get_job(waiting[1]).status is Status.QUEUED  # nothing yet
    answer = client.post(BULK, {**form, "confirm": "yes"}, follow=True).content.decode()
    assert "Cancel, 3 job(s): 2 cancelled, 1 already ended." in answer
    assert {get_job(job_id).state for job_id in [waiting[1], done]} == {State.CANCELLED}
    logged = LogEntry.objects.filter(object_id__in=[*waiting, done]).values_list("change_message", flat=True)
    assert sorted(logged) == [
        "Cancel (bulk): already_ended",
        "Cancel (bulk): cancelled",
        "Cancel (bulk): cancelled",
    ]


def test_a_bulk_action_on_a_whole_tab_acts_on_every_job_of_it(client, redis_db):
    later = [jobs.record.options(delay=600).enqueue(f"l{n}").id for n in range(5)]
    jobs.record.enqueue("ready")
    operator(client, "view_deadletter", "retry_job")
    form = {"action": "retry", "queue": "default", "tab": "scheduled", "all": "1"}
    page = client.post(BULK, form).content.decode()
    assert "Retry now: 5 jobs of queue default" in page
    ids = re.findall(r'<input type="hidden" name="ids" value="([^"]+)">', page)
    assert sorted(ids) == sorted(later)
    client.post(BULK, {**form, "ids": ids, "confirm": "yes"})
    assert {get_job(job_id).state for job_id in later} == {State.WAITING}


def test_a_bulk_action_needs_its_permission_a_known_action_and_the_csrf_token(client, redis_db):
    job_id = jobs.record.enqueue("w").id
    operator(client, "view_deadletter", "retry_job")
    form = {"action": "cancel", "queue": "default", "tab": "ready", "ids": [job_id], "confirm": "yes"}
    assert client.post(BULK, form).status_code == 403
    assert client.post(BULK, {**form, "action": "explode"}).status_code == 404
    assert client.get(BULK).status_code == 405
    guarded = Client(enforce_csrf_checks=True)
    guarded.force_login(operator(guarded, "view_deadletter", "cancel_job", username="csrf"))
    assert guarded.post(BULK, form).status_code == 403
    assert get_job(job_id).status is Status.QUEUED
    html = client.get(URL).content.decode()
    assert '<option value="retry">Retry now</option>' in html and 'value="cancel"' not in html


def test_a_search_by_name_or_argument_value_is_bounded_and_needs_the_payload_permission(client, redis_db):
    wanted = jobs.per_account.enqueue("17", "w").id
    jobs.per_account.enqueue("18", "w")
    greet = jobs.greet.enqueue("hi").id
    operator(client, "view_deadletter", "view_deadletter_payload")
    html = client.get(URL + "?queue=default&tab=ready&arg=17").content.decode()
    assert ids_on(html) == [wanted] and "1 match among every job of this tab." in html
    html = client.get(URL + "?queue=default&tab=ready&name=tests.greet").content.decode()
    assert (
        ids_on(html) == [greet]
        and "?queue=default&amp;tab=scheduled&amp;start=0&amp;name=tests.greet" in html
    )
    operator(client, "view_deadletter", username="no-payload")
    html = client.get(URL + "?queue=default&tab=ready&arg=17").content.decode()
    assert "Searching by an argument's value needs" in html
    assert len(ids_on(html)) == 3  # the argument left out: every ready job


def test_a_bulk_action_on_a_whole_tab_while_searching_acts_on_the_matches_only(client, redis_db):
    wanted = [jobs.record.options(delay=600).enqueue("17").id for _ in range(2)]
    other = jobs.record.options(delay=600).enqueue("18").id
    operator(client, "view_deadletter", "view_deadletter_payload", "cancel_job")
    form = {"action": "cancel", "queue": "default", "tab": "scheduled", "all": "1", "arg": "17"}
    page = client.post(BULK, form).content.decode()
    ids = re.findall(r'<input type="hidden" name="ids" value="([^"]+)">', page)
    assert sorted(ids) == sorted(wanted) and 'name="arg" value="17"' in page
    client.post(BULK, {**form, "ids": ids, "confirm": "yes"})
    assert get_job(other).state is State.SCHEDULED
