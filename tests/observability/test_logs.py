"""One log line per job outcome, with job id, name, queue, attempt, duration and outcome."""

from __future__ import annotations

import json
import logging

import pytest

from django_jobs import logs
from django_jobs.store import Claimed, JobRecord
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
    assert record.levelno == logging.ERROR
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
        logging.ERROR,
    )
    assert fine.duration >= 0 and dead.duration >= 0
