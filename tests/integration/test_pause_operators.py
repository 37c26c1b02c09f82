"""Pausing from the admin's queue overview and from ``manage.py jobs_pause`` / ``jobs_resume``: the
same service, one permission (403 or an error without it), POST only, every change in the admin log
under the operator's name, and a clear error for an unknown queue or job that pauses nothing."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_jobs import pause, paused
from django_jobs.testing import run_jobs
from tests.integration.dashboard_support import operator
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

OVERVIEW = reverse("admin:django_jobs_overview")
PAUSE = reverse("admin:django_jobs_pause")
RESUME = reverse("admin:django_jobs_resume")


def names() -> list[tuple[str, str]]:
    return [(one.kind, one.name) for one in paused()]


def messages_of(response) -> list[str]:
    return [str(message) for message in response.context["messages"]]


# --- the admin ---------------------------------------------------------------------------------------


def test_the_overview_pauses_and_resumes_a_queue_with_its_reason_and_audits_both(client, redis_db):
    user = operator(client, "view_queue_overview", "pause_queue")
    page = client.get(OVERVIEW).content.decode()
    assert 'value="Pause"' in page and PAUSE in page
    response = client.post(PAUSE, {"kind": "queue", "name": "emails", "reason": "provider down"}, follow=True)
    assert messages_of(response) == ["Queue emails is paused: its jobs wait."]
    (one,) = paused()
    assert (one.kind, one.name, one.by, one.reason) == ("queue", "emails", "op", "provider down")
    page = response.content.decode()
    assert "provider down" in page and 'value="Resume"' in page and "(paused)" in page
    response = client.post(RESUME, {"kind": "queue", "name": "emails"}, follow=True)
    assert messages_of(response) == ["Queue emails is resumed."]
    assert paused() == []
    log = list(LogEntry.objects.order_by("pk").values_list("user", "object_id", "change_message"))
    assert log == [
        (user.pk, "queue:emails", "Paused: provider down"),
        (user.pk, "queue:emails", "Resumed (0 held job(s) back on their queue)."),
    ]


def test_the_overview_shows_a_paused_job_type_with_its_held_jobs_and_resumes_it(client, redis_db):
    operator(client, "view_queue_overview", "pause_queue")
    client.post(PAUSE, {"kind": "job", "name": "tests.record"})
    for n in range(2):
        jobs.record.enqueue(f"held-{n}")
    run_jobs()
    overview = client.get(OVERVIEW).context["overview"]
    record = next(row for row in overview.jobs if row.name == "tests.record")
    assert record.paused is not None and record.held == 2
    assert [(pause.name, held) for pause, held in overview.paused] == [("tests.record", 2)]
    default = next(queue for queue in overview.queues if queue.name == "default")
    assert (default.depth, default.held) == (0, 2)
    response = client.post(RESUME, {"kind": "job", "name": "tests.record"}, follow=True)
    assert messages_of(response) == [
        "Job type tests.record is resumed. 2 held job(s) are back at the head of their queue."
    ]
    assert run_jobs() == 2


def test_without_the_permission_there_are_no_buttons_and_a_forged_post_is_refused(client, redis_db):
    operator(client, "view_queue_overview")
    pause(queue="default")
    page = client.get(OVERVIEW).content.decode()
    assert "Pause" not in page.replace("Paused", "") and 'value="Resume"' not in page
    assert client.post(PAUSE, {"kind": "queue", "name": "emails"}).status_code == 403
    assert client.post(RESUME, {"kind": "queue", "name": "default"}).status_code == 403
    assert names() == [("queue", "default")]
    assert not LogEntry.objects.exists()


def test_only_a_post_changes_anything(client, redis_db):
    operator(client, "view_queue_overview", "pause_queue")
    assert client.get(PAUSE, {"kind": "queue", "name": "emails"}).status_code == 405
    assert client.get(RESUME, {"kind": "queue", "name": "emails"}).status_code == 405
    assert names() == []


@pytest.mark.parametrize(
    ("form", "says"),
    [
        (
            {"kind": "queue", "name": "nowhere"},
            "Queue nowhere was not paused: Queue 'nowhere' is not in settings.RQ_QUEUES",
        ),
        (
            {"kind": "job", "name": "tests.nothing"},
            "Job type tests.nothing was not paused: No job is registered",
        ),
        ({"kind": "queue", "name": "emails", "reason": "x" * 501}, "at most 500 characters"),
    ],
)
def test_an_unknown_queue_or_job_is_an_error_message_and_pauses_nothing(client, redis_db, form, says):
    operator(client, "view_queue_overview", "pause_queue")
    response = client.post(PAUSE, form, follow=True)
    assert response.status_code == 200
    assert says in messages_of(response)[0]
    assert names() == [] and not LogEntry.objects.exists()


@pytest.mark.parametrize("form", [{}, {"kind": "host", "name": "x"}, {"kind": "queue", "name": ""}])
def test_a_form_no_button_sends_is_a_bad_request(client, redis_db, form):
    operator(client, "view_queue_overview", "pause_queue")
    assert client.post(PAUSE, form).status_code == 400
    assert client.post(RESUME, form).status_code == 400


# --- the commands ------------------------------------------------------------------------------------


def command(*argv: str) -> str:
    out = io.StringIO()
    call_command(*argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_commands_pause_list_and_resume_under_the_operators_name(client, redis_db):
    user = operator(client, "pause_queue", username="ops")
    assert command("jobs_pause") == "Nothing is paused.\n"
    out = command("jobs_pause", "emails", "--job", "tests.old_name", "--reason", "deploy", "--user", "ops")
    assert out == "queue emails: paused\njob tests.new_name: paused\n"
    assert command("jobs_pause", "emails", "--user", "ops") == "queue emails: already paused, unchanged\n"
    listed = command("jobs_pause").splitlines()
    assert [line.split(": paused ")[0] for line in listed] == ["job tests.new_name", "queue emails"]
    assert all(line.endswith(" s ago by ops: deploy") for line in listed), listed
    jobs.renamed.enqueue("held")
    run_jobs()
    out = command("jobs_resume", "--job", "tests.new_name", "--user", "ops")
    assert out == "job tests.new_name: resumed; 1 held job(s) back on their queue\n"
    assert command("jobs_resume", "--all", "--user", "ops") == "queue emails: resumed\n"
    assert command("jobs_resume", "emails", "--user", "ops") == "queue emails: was not paused\n"
    assert LogEntry.objects.filter(user=user).count() == 4


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("jobs_pause", "default", "nowhere"), "Queue 'nowhere' is not in settings.RQ_QUEUES"),
        (("jobs_pause", "--job", "tests.nothing"), "No job is registered under the name 'tests.nothing'"),
        (("jobs_resume",), "Name queues or --job types to resume, or pass --all"),
        (("jobs_resume", "emails", "--all"), "(not both)"),
        (("jobs_resume", "--job", "tests.nothing"), "No job is registered"),
    ],
)
def test_a_bad_target_is_one_error_and_pauses_nothing(client, redis_db, argv, says):
    operator(client, "pause_queue", username="ops")
    with pytest.raises(CommandError, match=re.escape(says)):
        command(*argv, "--user", "ops")
    assert names() == []


def test_the_commands_need_an_admin_user_with_the_permission(client, redis_db):
    operator(client, "view_queue_overview", username="viewer")
    with pytest.raises(CommandError, match=re.escape("lacks the 'django_jobs.pause_queue' permission")):
        command("jobs_pause", "emails", "--user", "viewer")
    with pytest.raises(CommandError, match="No admin user 'nobody'"):
        command("jobs_resume", "--all", "--user", "nobody")
    assert names() == []
