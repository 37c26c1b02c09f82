"""Dead-letter alerts: grouped by failure, rate-limited across processes through Redis, never fatal."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from django_jobs.failures import alerts
from django_jobs.failures.triage import triage
from django_jobs.models import DeadLetter
from django_jobs.signals import job_dead_lettered
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.alerts import ALERTED

pytestmark = pytest.mark.django_db(transaction=True)


def traceback_text(function: str = "charge", line: int = 12, path: str = "/srv/app/shop/jobs.py") -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/django_jobs/execution.py", line 250, in run\n'
        "    definition.func(*args, **kwargs)\n"
        f'  File "{path}", line {line}, in {function}\n'
        "    raise CardDeclined(order)\n"
        "shop.jobs.CardDeclined: declined\n"
    )


def dead_letter(job_name="shop.charge_card", exception="shop.jobs.CardDeclined", **where) -> DeadLetter:
    """A row as ``deadletter.record`` writes it: triaged, so it carries the dashboard's fingerprint."""
    traceback = traceback_text(**where)
    facts = triage(job_name, exception, traceback, [])
    return DeadLetter.objects.create(
        job_id=f"job-{DeadLetter.objects.count()}-{time.monotonic_ns()}",
        job_name=job_name,
        queue="default",
        exception=exception,
        message="declined",
        traceback=traceback,
        raised_at=facts.raised_at,
        fingerprint=facts.fingerprint,
        attempts=3,
        reason=DeadLetter.Reason.PERMANENT,
    )


@pytest.fixture
def received(settings) -> list[alerts.Alert]:
    """Alerts the configured hooks would get, with a window the test can wait out."""
    got: list[alerts.Alert] = []
    settings.JOBS = {**settings.JOBS, "ALERT_HOOKS": [got.append], "ALERT_WINDOW": 1}
    return got


def flush() -> int:
    from django_jobs.core.connections import get_connection

    return alerts.flush(get_connection("default"))


def test_ten_thousand_failures_of_one_kind_send_one_alert_then_one_summary_with_the_count(
    received, settings, redis_db
):
    settings.JOBS = {**settings.JOBS, "ALERT_WINDOW": 600}  # however long the flood takes
    entries = [dead_letter() for _ in range(4)]

    def flood(entry: DeadLetter) -> None:  # as four worker processes would
        for _ in range(2500):
            alerts.fire(entry)

    threads = [threading.Thread(target=flood, args=(entry,)) for entry in entries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (first,) = received
    assert (first.count, first.summary) == (1, False)
    assert flush() == 0  # the window is still open
    # Ten minutes pass.
    redis_db.delete(f"djjobs:alert:{first.fingerprint}")
    redis_db.zadd(alerts.DUE, {first.fingerprint: 0})
    assert flush() == 1
    summary = received[1]
    assert (summary.count, summary.summary, summary.fingerprint) == (9999, True, first.fingerprint)
    assert summary.dead_letter in entries
    assert summary.text.startswith("9999 more dead letter(s) of job shop.charge_card in the last 600 s")
    # The summary opened the next window: the failure going on is counted, not sent.
    alerts.fire(entries[0])
    assert len(received) == 2


def test_the_summary_goes_out_when_the_window_closes(received):
    entry = dead_letter()
    for _ in range(3):
        alerts.fire(entry)
    assert flush() == 0
    wait_for(flush, timeout=5, interval=0.1)
    assert [(a.count, a.summary) for a in received] == [(1, False), (2, True)]


def test_a_failure_after_the_window_reports_what_was_only_counted(received):
    entry = dead_letter()
    for _ in range(4):
        alerts.fire(entry)
    assert [a.count for a in received] == [1]
    time.sleep(1.1)  # no runjobs flushed the summary
    alerts.fire(entry)
    assert [a.count for a in received] == [1, 4]
    assert received[1].text.endswith("(3 more like it since the last alert)")


def test_failures_are_grouped_by_job_exception_and_raising_frame_not_line(received):
    alerts.fire(dead_letter())
    alerts.fire(dead_letter(line=40))  # the same failure after an edit above it
    alerts.fire(dead_letter(path="/srv/release-2/shop/jobs.py"))  # a new release directory
    alerts.fire(dead_letter(function="refund"))
    alerts.fire(dead_letter(exception="builtins.TimeoutError"))
    alerts.fire(dead_letter(job_name="shop.send_invoice"))
    assert len(received) == 4
    assert len({a.fingerprint for a in received}) == 4


@pytest.mark.parametrize(
    "path",
    [
        "/srv/app/shop/jobs.py",
        "/srv/app/billing/jobs.py",  # same file name, another package: another dashboard group
        "/venv/lib/python3.12/site-packages/stripe/api/charge.py",
        "C:\\app\\shop\\jobs.py",
    ],
)
def test_an_alert_group_is_the_dashboard_group_even_for_a_row_not_yet_triaged(path):
    entry = dead_letter(path=path)
    stored = entry.fingerprint
    entry.fingerprint = ""  # e.g. a row written before triage, or built by hand for a hook
    assert alerts.fingerprint(entry) == stored


def test_dead_letters_the_dashboard_splits_alert_separately(received):
    alerts.fire(dead_letter(path="/srv/app/shop/jobs.py"))
    alerts.fire(dead_letter(path="/srv/app/billing/jobs.py"))
    assert len(received) == 2
    assert [a.fingerprint for a in received] == [a.dead_letter.fingerprint for a in received]


def test_a_fingerprint_given_by_the_dead_letter_is_the_group(received):
    first, second = dead_letter(), dead_letter(function="refund")
    first.fingerprint = second.fingerprint = "same-failure"
    alerts.fire(first)
    alerts.fire(second)
    assert [a.fingerprint for a in received] == ["same-failure"]


def test_an_alert_reads_like_its_dead_letter(received):
    entry = dead_letter()
    alerts.fire(entry)
    (alert,) = received
    assert (alert.job_id, alert.job_name, alert.attempts) == (entry.job_id, entry.job_name, 3)
    assert alert.text == (
        "Job shop.charge_card dead-lettered after 3 attempt(s): shop.jobs.CardDeclined: declined"
    )


def test_a_failing_hook_is_logged_and_the_others_still_run(settings, caplog):
    got = []

    def broken(alert):
        raise RuntimeError("webhook down")

    settings.JOBS = {**settings.JOBS, "ALERT_HOOKS": ["tests.nowhere.hook", broken, got.append]}
    with caplog.at_level(logging.ERROR, logger="django_jobs.alerts"):
        alerts.fire(dead_letter())
    assert len(got) == 1
    assert "'tests.nowhere.hook' failed" in caplog.text and "webhook down" in caplog.text


def test_without_redis_the_alert_goes_out_unthrottled(received, redis_down, caplog):
    entry = dead_letter()
    with caplog.at_level(logging.WARNING, logger="django_jobs.alerts"):
        alerts.fire(entry)
        alerts.fire(entry)
    assert [a.count for a in received] == [1, 1]
    assert "alerting without it" in caplog.text


def test_the_default_hook_logs_an_error_and_mails_the_admins(settings, caplog):
    settings.JOBS = {**settings.JOBS, "ALERT_HOOKS": ["django_jobs.failures.alerts.log_and_mail_admins"]}
    entry = dead_letter()
    with caplog.at_level(logging.ERROR, logger="django_jobs.alerts"):
        alerts.log_and_mail_admins(alerts.Alert(entry, "f" * 16, count=5))
    (record,) = [r for r in caplog.records if r.name == "django_jobs.alerts"]
    assert record.levelno == logging.ERROR and record.count == 5 and record.job_id == entry.job_id
    (message,) = mail.outbox
    assert message.subject.endswith("[django_jobs] shop.charge_card dead-lettered (5x)")
    assert "(4 more like it since the last alert)" in message.body and "CardDeclined" in message.body


def test_the_webhook_example_posts_json():
    bodies: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    try:
        hook = alerts.webhook(f"http://127.0.0.1:{server.server_port}/hook")
        hook(alerts.Alert(dead_letter(), "abc", count=7, summary=True))
    finally:
        thread.join(10)
        server.server_close()
    (body,) = bodies
    assert body["count"] == 7 and body["summary"] is True and body["fingerprint"] == "abc"
    assert body["job"] == "shop.charge_card" and str(body["text"]).startswith("7 more dead letter(s)")


def test_through_the_worker_each_dead_letter_signals_but_one_alert_goes_out():
    signalled = []
    job_dead_lettered.connect(
        lambda dead_letter, **kw: signalled.append(dead_letter), weak=False, dispatch_uid="o"
    )
    try:
        handles = [jobs.invalid.enqueue(f"bad-{i}") for i in range(3)]
        run_jobs()
    finally:
        job_dead_lettered.disconnect(dispatch_uid="o")
    assert len(signalled) == 3
    assert [handles[0].id] == ALERTED
    (message,) = mail.outbox
    assert "tests.invalid" in message.subject
