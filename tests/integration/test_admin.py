"""The dead-letter admin: one permission per view and action (403 without it), POST with CSRF only,
audited in LogEntry, payloads redacted and everything escaped; requeues are compare-and-set,
transactional through the outbox, confirmed when they cover a whole filter, and paced."""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.testing import run_jobs
from tests.integration.dashboard_support import ALL_PERMISSIONS, drain, operator, record
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # the job page reads every outbox

CHANGELIST = "admin:django_jobs_deadletter_changelist"


def make_entry(**overrides):
    values = {
        "job_id": "j1",
        "job_name": "tests.record",
        "queue": "default",
        "args": ["again"],
        "kwargs": {},
        "exception": "builtins.ConnectionError",
        "message": "down",
        "attempts": 5,
        "reason": DeadLetter.Reason.EXHAUSTED,
    }
    return DeadLetter.objects.create(**{**values, **overrides})


def staff(client, *perms):
    return operator(client, "view_deadletter", *perms)


def post_action(client, action, entry, **extra):
    return client.post(
        reverse(CHANGELIST), {"action": action, "_selected_action": [entry.pk], "index": 0, **extra}
    )


def status(entry):
    return DeadLetter.objects.get(pk=entry.pk).status


# --- requeue and discard -------------------------------------------------------------------------


def test_requeue_action_needs_the_requeue_permission(client):
    entry = make_entry()
    staff(client)
    assert client.get(reverse(CHANGELIST)).status_code == 200
    assert post_action(client, "requeue", entry).status_code == 403
    assert client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk])).status_code == 403
    assert status(entry) == DeadLetter.Status.OPEN


def test_requeue_action_runs_the_job_again_with_fresh_attempts_and_is_audited(client, redis_db):
    entry = make_entry()
    user = staff(client, "requeue_deadletter")
    response = post_action(client, "requeue", entry)
    assert response.status_code == 302
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.REQUEUED and entry.requeued_job_id
    assert redis_db.hget(f"rq:job:{entry.requeued_job_id}", "dj_attempt") == b"0"
    assert run_jobs() == 1
    assert SideEffect.objects.filter(key="again").exists()
    log = LogEntry.objects.get()
    assert log.user == user and log.object_id == str(entry.pk)
    assert log.change_message == f"Requeued as job {entry.requeued_job_id} (1 selected)."


def test_requeue_is_post_only(client):
    entry = make_entry()
    staff(client, "requeue_deadletter")
    assert client.get(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk])).status_code == 405
    assert status(entry) == DeadLetter.Status.OPEN


def test_requeue_and_discard_buttons_on_the_detail_page(client, redis_db):
    entry = make_entry()
    staff(client, "requeue_deadletter", "discard_deadletter")
    page = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]) in page
    assert reverse("admin:django_jobs_deadletter_discard", args=[entry.pk]) in page
    client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]))
    assert status(entry) == DeadLetter.Status.REQUEUED
    page = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]) not in page  # nothing left to do


def test_a_double_requeue_queues_one_job(redis_db):
    entry = make_entry()
    first = deadletter.requeue([entry])
    second = deadletter.requeue([DeadLetter.objects.get(pk=entry.pk)])
    stale = deadletter.requeue([entry])  # an operator holding the old row
    assert len(first) == 1 and len(second) == 0 and len(stale) == 0
    assert redis_db.llen("rq:queue:default") == 1


def test_two_operators_requeueing_the_same_entries_at_once_queue_each_once(redis_db):
    entries = [record(args=[f"k{i}"]) for i in range(40)]
    start = threading.Barrier(2)
    results = []

    def operate():
        try:
            start.wait()
            results.append(len(deadletter.requeue(DeadLetter.objects.all(), rate=1000)))
        finally:
            connection.close()

    threads = [threading.Thread(target=operate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == len(entries)
    job_ids = set(DeadLetter.objects.values_list("requeued_job_id", flat=True))
    assert len(job_ids) == len(entries)
    queued = {i.decode() for i in redis_db.lrange("rq:queue:default", 0, -1)}
    scheduled = {i.decode() for i in redis_db.zrange("rq:scheduled:default", 0, -1)}
    assert queued | scheduled | set(OutboxEntry.objects.values_list("id", flat=True)) == job_ids
    assert redis_db.llen("rq:queue:default") + redis_db.zcard("rq:scheduled:default") == len(entries)


def test_a_rolled_back_requeue_leaves_the_entry_open_and_queues_nothing(redis_db):
    entry = make_entry()
    with pytest.raises(RuntimeError), transaction.atomic():
        deadletter.requeue([entry])
        raise RuntimeError("crash before commit")
    assert status(entry) == DeadLetter.Status.OPEN
    assert not OutboxEntry.objects.exists() and not redis_db.keys("rq:*")


def test_a_requeue_while_redis_is_down_waits_in_the_outbox(private_redis):
    entry = make_entry()
    private_redis.stop()
    assert len(deadletter.requeue([entry])) == 1
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.REQUEUED
    assert OutboxEntry.objects.get().id == entry.requeued_job_id


def test_a_bulk_requeue_is_paced_at_the_configured_rate(settings, redis_db):
    settings.JOBS = {**settings.JOBS, "REQUEUE_RATE": 4}
    entries = [record(args=[f"k{i}"]) for i in range(5)]
    before = time.time()
    assert len(deadletter.requeue(DeadLetter.objects.all())) == len(entries)
    assert redis_db.llen("rq:queue:default") == 1  # the first goes at once
    due = [score - before for _, score in redis_db.zrange("rq:scheduled:default", 0, -1, withscores=True)]
    assert len(due) == 4
    assert [round(d * 4) for d in due] == [1, 2, 3, 4]  # one every 1/4 s


def test_an_entry_whose_job_is_not_registered_is_left_open_and_reported(client, redis_db):
    ghost = make_entry(job_id="ghost", job_name="tests.renamed_without_alias")
    fine = make_entry(job_id="fine")
    staff(client, "requeue_deadletter")
    response = client.post(
        reverse(CHANGELIST),
        {"action": "requeue", "_selected_action": [ghost.pk, fine.pk], "index": 0},
        follow=True,
    )
    text = response.content.decode()
    assert "Requeued 1 dead letter(s)" in text and "no job of that name is registered" in text
    assert status(ghost) == DeadLetter.Status.OPEN and status(fine) == DeadLetter.Status.REQUEUED


def test_discard_needs_its_permission_and_keeps_the_row(client):
    entry = make_entry()
    staff(client, "requeue_deadletter")
    assert post_action(client, "discard", entry).status_code == 403
    assert client.post(reverse("admin:django_jobs_deadletter_discard", args=[entry.pk])).status_code == 403
    client.logout()
    User.objects.all().delete()
    user = staff(client, "discard_deadletter")
    post_action(client, "discard", entry)
    assert status(entry) == DeadLetter.Status.DISCARDED
    assert LogEntry.objects.get().user == user
    assert deadletter.requeue([entry]).entries == []  # a discarded entry is not requeued


def test_delete_needs_the_delete_permission(client):
    entry = make_entry()
    staff(client, "requeue_deadletter", "discard_deadletter")
    assert post_action(client, "delete_selected", entry, post="yes").status_code == 403
    assert client.post(reverse("admin:django_jobs_deadletter_delete", args=[entry.pk])).status_code == 403
    assert DeadLetter.objects.filter(pk=entry.pk).exists()
    client.logout()
    User.objects.all().delete()
    staff(client, "delete_deadletter")
    post_action(client, "delete_selected", entry, post="yes")
    assert not DeadLetter.objects.filter(pk=entry.pk).exists()


# --- requeue everything matching a filter --------------------------------------------------------


def test_requeue_all_matching_shows_the_count_and_changes_nothing_until_confirmed(client, redis_db):
    for i in range(3):
        record(args=[f"m{i}"], exception="builtins.KeyError")
    other = record(exception="builtins.ValueError")
    user = staff(client, "requeue_deadletter")
    url = reverse("admin:django_jobs_deadletter_requeue_matching") + "?exception__exact=builtins.KeyError"
    page = client.get(url)
    assert page.status_code == 200 and page.context["count"] == 3
    assert "<strong>3</strong> open dead letters" in page.content.decode()
    assert not DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).exists() and not redis_db.keys(
        "rq:*"
    )
    late = record(args=["late"], exception="builtins.KeyError")  # fails after the operator looked
    response = client.post(url, {"through": page.context["through"]})
    assert response.status_code == 302 and "exception__exact=builtins.KeyError" in response["Location"]
    assert DeadLetter.objects.filter(status=DeadLetter.Status.REQUEUED).count() == 3
    assert status(other) == status(late) == DeadLetter.Status.OPEN
    assert LogEntry.objects.filter(user=user).count() == 3
    assert all("(3 selected)" in log.change_message for log in LogEntry.objects.all())


def test_select_all_across_pages_goes_to_the_confirmation_page(client):
    entry = record()
    staff(client, "requeue_deadletter")
    response = post_action(client, "requeue", entry, select_across="1")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:django_jobs_deadletter_requeue_matching"))
    assert status(entry) == DeadLetter.Status.OPEN


# --- permissions, GET safety and CSRF across every view ------------------------------------------


def action(name, entry):
    return {"action": name, "_selected_action": entry.pk, "index": 0}


def views(entry):
    """(method, url, data, permission) for every view and action of the dashboard."""
    change = reverse("admin:django_jobs_deadletter_change", args=[entry.pk])
    matching = reverse("admin:django_jobs_deadletter_requeue_matching")
    find = f"{reverse('admin:django_jobs_deadletter_find_job')}?id={entry.job_id}"
    return [
        ("get", reverse(CHANGELIST), {}, "view_deadletter"),
        ("get", change, {}, "view_deadletter"),
        ("get", reverse("admin:django_jobs_deadletter_groups"), {}, "view_deadletter"),
        ("get", reverse("admin:django_jobs_deadletter_history", args=[entry.pk]), {}, "view_deadletter"),
        ("get", reverse("admin:django_jobs_overview"), {}, "view_queue_overview"),
        ("get", reverse("admin:django_jobs_deadletter_job", args=[entry.job_id]), {}, "view_deadletter"),
        ("get", find, {}, "view_deadletter"),
        ("post", reverse("admin:django_jobs_job_cancel", args=[entry.job_id]), {}, "cancel_job"),
        ("post", reverse("admin:django_jobs_job_retry", args=[entry.job_id]), {}, "retry_job"),
        ("post", reverse("admin:django_jobs_pause"), {"kind": "queue", "name": "emails"}, "pause_queue"),
        ("post", reverse("admin:django_jobs_resume"), {"kind": "queue", "name": "emails"}, "pause_queue"),
        ("get", matching, {}, "requeue_deadletter"),
        ("post", matching, {"through": entry.pk}, "requeue_deadletter"),
        ("post", reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]), {}, "requeue_deadletter"),
        ("post", reverse("admin:django_jobs_deadletter_discard", args=[entry.pk]), {}, "discard_deadletter"),
        ("get", reverse("admin:django_jobs_deadletter_delete", args=[entry.pk]), {}, "delete_deadletter"),
        ("post", reverse(CHANGELIST), action("requeue", entry), "requeue_deadletter"),
        ("post", reverse(CHANGELIST), action("discard", entry), "discard_deadletter"),
        ("post", reverse(CHANGELIST), action("delete_selected", entry), "delete_deadletter"),
    ]


def test_each_view_and_action_answers_403_without_its_own_permission(client):
    entry = record()
    for method, url, data, permission in views(entry):
        User.objects.all().delete()
        others = [p for p in ALL_PERMISSIONS if p != permission]
        operator(client, *others)
        response = getattr(client, method)(url, data)
        assert response.status_code == 403, (method, url, permission)
        assert status(entry) == DeadLetter.Status.OPEN and DeadLetter.objects.count() == 1


def test_each_view_answers_with_only_its_permissions(client, redis_db):
    for index in range(len(views(record()))):
        User.objects.all().delete()
        DeadLetter.objects.all().delete()
        method, url, data, permission = views(record())[index]
        operator(client, "view_deadletter", permission)
        assert getattr(client, method)(url, data).status_code in (200, 302), (method, url)


def test_nothing_changes_on_get(client, redis_db):
    entry = record()
    (requeued,) = deadletter.requeue([record(args=["done"])]).entries
    before = list(DeadLetter.objects.order_by("pk").values())
    keys_before = sorted(redis_db.keys())
    operator(client, *ALL_PERMISSIONS)
    urls = [url for method, url, _, _ in views(entry) if method == "get"]
    urls += [
        reverse(CHANGELIST) + "?status__exact=open&q=again",
        reverse("admin:django_jobs_deadletter_job", args=[requeued.requeued_job_id]),
        reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]),  # 405, not a requeue
        reverse("admin:django_jobs_deadletter_discard", args=[entry.pk]),
    ]
    for url in urls:
        assert client.get(url).status_code in (200, 302, 405), url
    assert list(DeadLetter.objects.order_by("pk").values()) == before
    assert not LogEntry.objects.exclude(change_message__startswith="Requeued as job").exists()
    assert sorted(redis_db.keys()) == keys_before


def test_state_changes_need_the_csrf_token(redis_db):
    entry = record()
    client = Client(enforce_csrf_checks=True)
    operator(client, *ALL_PERMISSIONS)
    for method, url, data, _ in views(entry):
        if method == "post":
            assert client.post(url, data).status_code == 403, url
    assert status(entry) == DeadLetter.Status.OPEN and not redis_db.keys("rq:*")


def test_non_staff_users_are_sent_to_login(client):
    entry = make_entry()
    User.objects.create_user("civilian", password="pw")
    client.login(username="civilian", password="pw")
    response = client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]))
    assert response.status_code == 302 and "login" in response["Location"]
    assert status(entry) == DeadLetter.Status.OPEN


# --- what the detail page shows ------------------------------------------------------------------


def test_payload_and_everything_else_is_escaped(client):
    script = "<script>alert(1)</script>"
    entry = record(
        job_name=script,
        args=[script],
        kwargs={"note": script},
        exception=f"builtins.{script}",
        message=script,
        function=script,
        reason=DeadLetter.Reason.UNREGISTERED,
    )
    operator(client, *ALL_PERMISSIONS)
    pages = [
        reverse("admin:django_jobs_deadletter_change", args=[entry.pk]),
        reverse(CHANGELIST),
        reverse("admin:django_jobs_deadletter_groups"),
        reverse(CHANGELIST) + f"?fingerprint={entry.fingerprint}",
        reverse("admin:django_jobs_overview"),
    ]
    for url in pages:
        body = client.get(url).content.decode()
        assert "<script>alert" not in body, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, url


def test_the_payload_is_pretty_json_and_redacted(client):
    entry = record(
        args=[7], kwargs={"card": {"number": "4242", "api_key": "sk_live_1"}, "password": "hunter2"}
    )
    operator(client, "view_deadletter", "view_deadletter_payload")
    body = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert "sk_live_1" not in body and "hunter2" not in body
    assert "&quot;password&quot;: &quot;********************&quot;" in body
    assert "&quot;number&quot;: &quot;4242&quot;" in body and "&quot;args&quot;: [\n    7\n  ]" in body
    entry.refresh_from_db()
    assert entry.kwargs["password"] == "hunter2"  # only what is shown is masked; a requeue needs the rest


def redact_everything(data, *, job_name):
    return {"redacted for": job_name}


def broken_redactor(data, *, job_name):
    raise RuntimeError("bug in the hook")


@pytest.mark.parametrize(
    ("hook", "shown"),
    [
        ("tests.integration.test_admin.redact_everything", "redacted for"),
        ("tests.integration.test_admin.broken_redactor", "hidden: the redaction hook failed"),
    ],
)
def test_the_redaction_hook_is_a_setting_and_fails_closed(client, settings, hook, shown):
    settings.JOBS = {**settings.JOBS, "REDACT": hook}
    entry = record(args=["visible-if-unredacted"])
    operator(client, "view_deadletter", "view_deadletter_payload")
    body = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert shown in body and "visible-if-unredacted" not in body


def test_without_the_payload_permission_the_payload_is_hidden_and_unsearchable(client):
    entry = record(args=["secret-order-42"])
    operator(client, "view_deadletter")
    body = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert "secret-order-42" not in body and "Can view dead-letter payloads" in body
    listing = client.get(reverse(CHANGELIST) + "?q=secret-order-42")
    assert list(listing.context["cl"].result_list) == []  # a search must not reveal payloads either


def test_requeued_and_failed_again_entries_link_to_each_other(client, redis_db):
    from tests.testapp import jobs

    jobs.always_fails.enqueue("again-and-again")
    drain()
    first = DeadLetter.objects.get()
    deadletter.requeue([first])
    drain()
    first.refresh_from_db()
    second = DeadLetter.objects.exclude(pk=first.pk).get()
    assert second.job_id == first.requeued_job_id and second.requeued_from == first
    operator(client, *ALL_PERMISSIONS)
    page = client.get(reverse("admin:django_jobs_deadletter_change", args=[first.pk])).content.decode()
    assert reverse("admin:django_jobs_deadletter_job", args=[first.requeued_job_id]) in page
    assert reverse("admin:django_jobs_deadletter_change", args=[second.pk]) in page
    page = client.get(reverse("admin:django_jobs_deadletter_change", args=[second.pk])).content.decode()
    assert reverse("admin:django_jobs_deadletter_change", args=[first.pk]) in page
    job = client.get(reverse("admin:django_jobs_deadletter_job", args=[first.requeued_job_id]))
    assert job.context["died"] == second and job.context["origin"] == first
    assert job.context["state"].status == "failed" and job.context["state"].attempts == 3


def test_the_job_page_shows_a_paced_requeue_as_scheduled(client, redis_db, settings):
    settings.JOBS = {**settings.JOBS, "REQUEUE_RATE": 1}
    entries = [record(args=[f"k{i}"]) for i in range(2)]
    deadletter.requeue(entries)
    later = DeadLetter.objects.get(pk=entries[1].pk)
    operator(client, "view_deadletter")
    job = client.get(reverse("admin:django_jobs_deadletter_job", args=[later.requeued_job_id]))
    assert job.context["state"].status == "scheduled" and job.context["state"].due_at is not None
    assert client.get(reverse("admin:django_jobs_deadletter_job", args=["not-linked"])).status_code == 404


def test_the_job_page_shows_any_job_with_its_result_and_errors_and_hides_the_payload_without_permission(
    client, redis_db
):
    from django_jobs.testing import run_jobs
    from tests.conftest import wait_for
    from tests.testapp import jobs

    handle = jobs.compute.enqueue("secret-key", failures=1)
    wait_for(lambda: run_jobs() >= 0 and handle.status == "finished")
    url = reverse("admin:django_jobs_deadletter_job", args=[handle.id])
    operator(client, "view_deadletter")
    page = client.get(url)
    assert page.status_code == 200 and page.context["state"].attempts == 2
    html = page.content.decode()
    assert "tests.compute" in html and "builtins.ConnectionError" in html and "flaky upstream" in html
    assert "secret-key" not in html and "Hidden: seeing payloads" in html  # arguments and result
    operator(client, "view_deadletter", "view_deadletter_payload", username="payload-op")
    html = client.get(url).content.decode()
    assert "secret-key" in html and "2.5" in html  # the arguments and the result
    found = client.get(reverse("admin:django_jobs_deadletter_find_job") + f"?id={handle.id}")
    assert found.status_code == 302 and found["Location"] == url
    assert client.get(reverse("admin:django_jobs_deadletter_find_job") + "?id=no%20such").status_code == 404
    assert client.get(reverse("admin:django_jobs_deadletter_job", args=["unknownid"])).status_code == 404


def test_cancel_and_retry_now_from_the_job_page_act_and_are_audited(client, redis_db):
    from django_jobs.testing import run_jobs
    from tests.testapp import jobs

    operator(client, "view_deadletter", "cancel_job", "retry_job")
    waiting = jobs.record.enqueue("never")
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[waiting.id])).content.decode()
    assert reverse("admin:django_jobs_job_cancel", args=[waiting.id]) in page
    assert client.get(reverse("admin:django_jobs_job_cancel", args=[waiting.id])).status_code == 405
    client.post(reverse("admin:django_jobs_job_cancel", args=[waiting.id]))
    assert waiting.status == "canceled"
    later = jobs.record.options(delay=3600).enqueue("now")
    client.post(reverse("admin:django_jobs_job_retry", args=[later.id]))
    assert later.status == "queued"
    run_jobs()
    assert SideEffect.objects.filter(key="now").count() == 1 and not SideEffect.objects.filter(key="never")
    dead = jobs.invalid.enqueue("dl")
    run_jobs()
    response = client.post(reverse("admin:django_jobs_job_retry", args=[dead.id]))
    entry = DeadLetter.objects.get(job_id=dead.id)
    assert entry.status == DeadLetter.Status.REQUEUED
    assert response["Location"] == reverse("admin:django_jobs_deadletter_job", args=[entry.requeued_job_id])
    logged = list(LogEntry.objects.order_by("pk").values_list("object_id", "change_message"))
    assert (waiting.id, "Cancel: cancelled") in logged and (later.id, "Retry now: started") in logged
    assert (dead.id, "Retry now: requeued") in logged
