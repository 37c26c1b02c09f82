"""``manage.py deadletters``: the admin's filters, services, permissions and audit, from a terminal."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.urls import reverse

from django_jobs.models import DeadLetter
from tests.integration.dashboard_support import operator, record

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("deadletters", *args, stdout=out, stderr=out)
    return out.getvalue()


def admin_user(*codenames: str, username: str = "night-shift") -> User:
    user = User.objects.create_user(username, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def entries():
    return {
        "charge": record("tests.record", ["order-1"], exception="builtins.KeyError", message="card declined"),
        "mail": record("tests.invalid", ["a@example.com"], exception="builtins.ValueError", queue="emails"),
        "flaky": record("tests.record", ["order-2"], exception="builtins.ConnectionError", function="sync"),
    }


def test_list_filters_like_the_admin(entries, client):
    header, *lines = run("list", "--job", "tests.record").splitlines()
    assert header.split() == ["ID", "STATUS", "CREATED", "(UTC)", "JOB", "QUEUE", "EXCEPTION", "MESSAGE"]
    assert len(lines) == 2 and all("tests.record" in line for line in lines)
    assert lines[0].index(lines[0].split()[1]) == header.index("STATUS")  # the header is over its column
    assert run("list", "--queue", "emails").count("\n") == 2
    assert "card declined" in run("list", "--exception", "builtins.KeyError")
    assert run("list", "--since", "1h").count("\n") == 4 and run("list", "--until", "1h") == ""
    assert run("list", "--status", "requeued") == ""
    # one search implementation: the terminal and the browser select the same entries
    operator(client, "view_deadletter", "view_deadletter_payload")
    for term in ("order", "declined", '"card declined" order-1', "example.com"):
        shown = client.get(reverse("admin:django_jobs_deadletter_changelist"), {"q": term}).context["cl"]
        in_admin = {e.pk for e in shown.result_list}
        rows = [json.loads(line) for line in run("list", "--search", term, "--json").splitlines()]
        assert {row["pk"] for row in rows} == in_admin and in_admin, term


def test_list_by_group(entries):
    header, *lines = run("list", "--by-group").splitlines()
    assert header.split()[:4] == ["GROUP", "DEAD", "(OPEN)", "LAST"]
    assert len(lines) == 3 and entries["flaky"].fingerprint in "".join(lines)
    assert "shop/jobs.py in sync" in "".join(lines)
    assert run("list", "--group", entries["charge"].fingerprint).count("\n") == 2


def test_show_prints_everything_with_the_payload_redacted():
    entry = record("tests.record", ["order-9"], {"api_token": "tok_live_123"}, message="gateway said no")
    text = run("show", str(entry.pk))
    for expected in (entry.job_id, "gateway said no", "order-9", '"api_token": "********************"',
                     "Traceback (most recent call last)", "shop/jobs.py in charge", "1  "):  # fmt: skip
        assert expected in text, expected
    assert "tok_live_123" not in text
    with pytest.raises(CommandError, match=f"No dead letter has id {entry.pk + 1}"):
        run("show", str(entry.pk + 1))


def test_requeue_by_filter_is_paced_audited_and_checked(entries, redis_db):
    user = admin_user("requeue_deadletter")
    text = run("requeue", "--job", "tests.record", "--user", user.username, "--yes", "--rate", "2")
    assert "Requeued 2 dead letter(s)." in text
    requeued = DeadLetter.objects.filter(status=DeadLetter.Status.REQUEUED)
    assert {e.pk for e in requeued} == {entries["charge"].pk, entries["flaky"].pk}
    assert redis_db.llen("rq:queue:default") == 1 and redis_db.zcard("rq:scheduled:default") == 1
    assert {log.user for log in LogEntry.objects.all()} == {user} and LogEntry.objects.count() == 2
    assert "No open dead letter matches." in run("requeue", "--job", "tests.record", "--user", user.username)


def test_changes_need_the_same_permission_as_in_the_admin(entries):
    viewer = admin_user("view_deadletter", "discard_deadletter")
    with pytest.raises(CommandError, match=r"lacks the 'django_jobs\.requeue_deadletter' permission"):
        run("requeue", str(entries["charge"].pk), "--user", viewer.username, "--yes")
    with pytest.raises(CommandError, match="No admin user 'nobody'"):
        run("discard", str(entries["charge"].pk), "--user", "nobody", "--yes")
    assert not DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).exists()


def test_changes_need_a_selection_and_a_confirmation(entries, monkeypatch):
    user = admin_user("requeue_deadletter", "discard_deadletter")
    with pytest.raises(CommandError, match="pass --all"):
        run("requeue", "--user", user.username, "--yes")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal
    with pytest.raises(CommandError, match="pass --yes"):
        run("discard", str(entries["mail"].pk), "--user", user.username)
    assert not DeadLetter.objects.exclude(status=DeadLetter.Status.OPEN).exists()
    assert "Discarded 3 dead letter(s)." in run("discard", "--all", "--user", user.username, "--yes")
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DISCARDED).count() == 3
