"""The dead-letter admin: permission-gated requeue, POST only, audited, escaped."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from django_jobs import deadletter
from django_jobs.models import DeadLetter
from django_jobs.testing import run_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


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
    user = User.objects.create_user("op", password="pw", is_staff=True)
    for codename in ("view_deadletter", *perms):
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client.force_login(user)
    return user


def post_action(client, action, entry):
    return client.post(
        reverse("admin:django_jobs_deadletter_changelist"), {"action": action, "_selected_action": [entry.pk]}
    )


def test_requeue_action_needs_the_requeue_permission(client):
    entry = make_entry()
    staff(client)
    assert client.get(reverse("admin:django_jobs_deadletter_changelist")).status_code == 200
    assert post_action(client, "requeue", entry).status_code == 403
    assert client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk])).status_code == 403
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.OPEN


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
    assert log.user == user and log.object_id == str(entry.pk) and "Requeued" in log.change_message


def test_requeue_is_post_only(client):
    entry = make_entry()
    staff(client, "requeue_deadletter")
    assert client.get(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk])).status_code == 405
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.OPEN


def test_requeue_button_on_the_detail_page(client, redis_db):
    entry = make_entry()
    staff(client, "requeue_deadletter")
    page = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk]))
    assert reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]) in page.content.decode()
    client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]))
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.REQUEUED


def test_a_double_requeue_queues_one_job(redis_db):
    entry = make_entry()
    first = deadletter.requeue([entry])
    second = deadletter.requeue([DeadLetter.objects.get(pk=entry.pk)])
    stale = deadletter.requeue([entry])  # an operator holding the old row
    assert len(first) == 1 and second == [] and stale == []
    assert redis_db.llen("rq:queue:default") == 1


def test_discard_needs_its_permission_and_keeps_the_row(client):
    entry = make_entry()
    staff(client, "requeue_deadletter")
    assert post_action(client, "discard", entry).status_code == 403
    client.logout()
    User.objects.all().delete()
    staff(client, "discard_deadletter")
    post_action(client, "discard", entry)
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.DISCARDED


def test_payload_and_message_are_escaped(client):
    entry = make_entry(args=["<script>alert(1)</script>"], message="<script>boom</script>")
    staff(client)
    body = client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])).content.decode()
    assert "<script>alert(1)</script>" not in body and "<script>boom</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_non_staff_users_are_sent_to_login(client):
    entry = make_entry()
    User.objects.create_user("civilian", password="pw")
    client.login(username="civilian", password="pw")
    response = client.post(reverse("admin:django_jobs_deadletter_requeue", args=[entry.pk]))
    assert response.status_code == 302 and "login" in response["Location"]
    entry.refresh_from_db()
    assert entry.status == DeadLetter.Status.OPEN
