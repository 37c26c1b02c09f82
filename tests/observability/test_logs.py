"""One log line per job outcome, with job id, name, queue, attempt, duration and outcome."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
from collections.abc import Iterator

import pytest

from django_jobs.store import Claimed, JobRecord
from django_jobs.telemetry import logs
from django_jobs.testing import run_jobs
from tests.testapp import jobs

CLAIMED = Claimed("emails", "0123abcd", "0123abcd:nonce", JobRecord("0123abcd", {"dj_attempt": b"2"}))
FIELDS = {"job": "billing.send_invoice", "job_id": "0123abcd", "queue": "emails", "attempt": 2}


def failure() -> ConnectionError:
    try:
        raise ConnectionError('upstream "mail" down\nafter 3 s')
    except ConnectionError as exc:
        return exc


def outcome_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django_jobs.worker" and hasattr(r, "outcome")]


@pytest.fixture
def json_format(settings):
    settings.JOBS = {**settings.JOBS, "LOG_FORMAT": "json"}


def test_text_is_key_value_pairs_on_one_line_and_a_failure_carries_its_traceback(caplog):
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.1234567)
        logs.log_outcome("retry", "billing.send_invoice", CLAIMED, 2.5, failure())
    success, retry = outcome_records(caplog)
    assert success.levelno == logging.INFO and success.exc_info is None
    assert success.getMessage() == (
        "job=billing.send_invoice job_id=0123abcd queue=emails attempt=2 outcome=success duration=0.123457"
    )
    assert retry.levelno == logging.WARNING and retry.exc_info is not None
    assert retry.getMessage().endswith(
        'outcome=retry duration=2.5 error="builtins.ConnectionError: upstream \\"mail\\" down\\nafter 3 s"'
    )
    assert "\n" not in retry.getMessage()
    assert {key: getattr(retry, key) for key in FIELDS} == FIELDS


def test_json_is_one_object_per_line_with_the_traceback_inside(caplog, json_format):
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        logs.log_outcome("dead", "billing.send_invoice", CLAIMED, 0.5, failure())
    (record,) = outcome_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None  # a formatter would append the traceback on lines of its own
    assert "\n" not in record.getMessage()
    line = json.loads(record.getMessage())
    assert {key: line[key] for key in FIELDS} == FIELDS
    assert line["outcome"] == "dead" and line["duration"] == 0.5
    assert line["error"].startswith("builtins.ConnectionError: upstream")
    assert "Traceback (most recent call last)" in line["traceback"]


@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_every_attempt_once(caplog):
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        ok = jobs.record.enqueue("fine")
        bad = jobs.invalid.enqueue("bad")
        run_jobs()
    records = outcome_records(caplog)
    fine, dead = sorted(records, key=lambda r: r.job_id != ok.id)
    assert len(records) == 2 and (fine.job_id, dead.job_id) == (ok.id, bad.id)
    assert (fine.job, fine.outcome, fine.attempt, fine.levelno) == (
        "tests.record",
        "success",
        1,
        logging.INFO,
    )
    assert (dead.job, dead.outcome, dead.queue, dead.levelno) == (
        "tests.invalid",
        "dead",
        "default",
        logging.WARNING,
    )
    assert fine.duration >= 0 and dead.duration >= 0


@pytest.mark.django_db(transaction=True)
def test_a_dead_letter_is_one_error_line_its_alert(caplog):
    """An error tracker's logging integration makes an event of each ERROR: one per dead letter."""
    with caplog.at_level(logging.INFO):
        bad = jobs.invalid.enqueue("bad")
        run_jobs()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.getMessage()) for r in errors] == [
        (
            "django_jobs.alerts",
            "Job tests.invalid dead-lettered after 1 attempt(s): tests.testapp.jobs.Invalid: bad input bad",
        )
    ], [r.getMessage() for r in errors]
    assert errors[0].job_id == bad.id


# --- runjobs' own console, in a project that configured no logging ------------------------------

TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


@pytest.fixture
def fresh_console() -> Iterator[io.StringIO]:
    """The console ``runjobs`` sets up when the project configured no logging, on a stream the test
    reads; what the test settings configured is put back after. See ``alone``."""
    loggers = [logging.getLogger(name) for name in ("django_jobs", "django_jobs.worker")]
    saved = [(found.handlers[:], found.level, found.propagate) for found in loggers]
    for found in loggers:
        found.handlers.clear()
        found.setLevel(logging.NOTSET)
    try:
        with contextlib.redirect_stderr(io.StringIO()) as stream, alone():
            assert logs.console_defaults(1)
        yield stream
    finally:
        logs._console = None
        for found, (handlers, level, propagate) in zip(loggers, saved, strict=True):
            found.handlers[:] = handlers
            found.setLevel(level)
            found.propagate = propagate


@contextlib.contextmanager
def alone() -> Iterator[None]:
    """Without pytest's own handlers on the root logger (it adds them while each test runs), as in a
    ``runjobs`` process."""
    saved = logging.root.handlers[:]
    logging.root.handlers.clear()
    try:
        yield
    finally:
        logging.root.handlers[:] = saved


class Tap(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_console_prints_the_outcome_line_as_its_logging_format_would(fresh_console, monkeypatch):
    """The line is written straight to the console's stream (logging's machinery costs as much as a
    no-op job); it must be the very line the console's formatter prints, which it does again as soon as
    anything else listens (here: a filter that passes every record)."""
    logged: list[tuple[object, ...]] = []
    log = logs.logger.log
    monkeypatch.setattr(logs.logger, "log", lambda *args, **kw: logged.append(args) or log(*args, **kw))
    with alone():
        logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.1234567)
        logs.log_outcome("dead", "billing.send_invoice", CLAIMED, 0.5)
        assert logged == []  # no LogRecord made, while the console is the only listener
        logging.getLogger("django_jobs").handlers[0].addFilter(lambda record: True)
        logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.1234567)
    assert len(logged) == 1
    direct, dead, formatted = fresh_console.getvalue().splitlines()
    job = r"job=billing\.send_invoice job_id=0123abcd queue=emails attempt=2"
    success = rf"{TIMESTAMP} INFO \[{os.getpid()}\] {job} outcome=success duration=0\.123457"
    assert re.fullmatch(success, direct), direct
    assert re.fullmatch(rf"{TIMESTAMP} WARNING \[{os.getpid()}\] job=.* outcome=dead duration=0\.5", dead), (
        dead
    )
    assert direct[23:] == formatted[23:]  # all but the time: the formatter's own line


def test_a_handler_or_filter_added_later_gets_every_line(fresh_console):
    tap = Tap()
    with alone():
        logging.root.addHandler(tap)
        logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.25)
    (record,) = tap.records
    assert record.getMessage().endswith("outcome=success duration=0.25") and record.job_id == "0123abcd"
    assert fresh_console.getvalue().count("outcome=success") == 1  # and the console printed it once
    logging.getLogger("django_jobs.worker").addFilter(lambda record: record.outcome != "success")
    try:
        with alone():
            logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.5)
            logs.log_outcome("retry", "billing.send_invoice", CLAIMED, 0.5, failure())
    finally:
        logging.getLogger("django_jobs.worker").filters.clear()
    printed = fresh_console.getvalue()
    assert "duration=0.5" not in printed.split("outcome=retry")[0] and "outcome=retry" in printed
    assert "Traceback (most recent call last)" in printed  # a failure's line goes through logging


def test_verbosity_0_keeps_the_console_quiet_about_successes(fresh_console):
    logging.getLogger("django_jobs").setLevel(logging.WARNING)  # what -v 0 sets
    with alone():
        logs.log_outcome("success", "billing.send_invoice", CLAIMED, 0.25)
    assert fresh_console.getvalue() == ""
