"""Naming, describing and logging whatever a job raised, and reading a garbage periodic-run id,
never raise: nothing about an exception object or a job's hash may crash the worker."""

from __future__ import annotations

import json
import logging

import pytest

from django_jobs.store import Claimed, JobRecord
from django_jobs.telemetry import logs
from django_jobs.workflows import cron
from tests.testapp.jobs import RAISES

CLAIMED = Claimed("default", "0123abcd", "0123abcd:nonce", JobRecord("0123abcd", {"dj_attempt": b"1"}))


class ModuleNamesNothing(Exception):
    """A class whose ``__module__`` is not text, as generated code sometimes leaves it."""


ModuleNamesNothing.__module__ = None  # type: ignore[assignment]


class StrReturnsBytes(Exception):
    def __str__(self) -> str:
        return b"bytes"  # type: ignore[return-value]


@pytest.mark.parametrize("kind", sorted(RAISES))
def test_any_exception_is_named_described_and_given_a_traceback(kind):
    exc = RAISES[kind]()
    assert logs.exception_path(exc).endswith(type(exc).__qualname__)
    assert isinstance(logs.exception_text(exc), str)
    assert type(exc).__qualname__ in logs.exception_traceback(exc)


def test_fallbacks_say_what_failed():
    assert logs.exception_text(RAISES["Unprintable"]()) == "Unprintable('never shown')"
    assert (
        logs.exception_text(RAISES["Unspeakable"]()) == "<unprintable tests.testapp.jobs.Unspeakable object>"
    )
    assert logs.exception_text(StrReturnsBytes("x")) == "StrReturnsBytes('x')"
    assert logs.exception_path(ModuleNamesNothing()) == "None.ModuleNamesNothing"
    assert "(the traceback could not be formatted)" in logs.exception_traceback(RAISES["JunkNotes"]())


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("kind", sorted(RAISES))
def test_the_outcome_line_of_any_exception_is_logged(kind, log_format, settings, caplog):
    settings.JOBS = {**settings.JOBS, "LOG_FORMAT": log_format}
    with caplog.at_level(logging.INFO, logger="django_jobs.worker"):
        logs.log_outcome("retry", "tests.raises", CLAIMED, 0.5, RAISES[kind]())
    (record,) = [r for r in caplog.records if getattr(r, "outcome", None) == "retry"]
    assert f"{type(RAISES[kind]()).__qualname__}: " in record.error
    if log_format == "json":
        assert json.loads(record.getMessage())["traceback"]
    logging.Formatter().format(record)  # what a handler does with it; must not raise


@pytest.mark.parametrize(
    "garbage", [b"", b"x", b"-1", b"0", b"1.5", b"99999999999999999999999", b"\xff", b"\x00"]
)
def test_a_garbage_periodic_run_id_is_ignored_without_touching_the_database(garbage, caplog):
    cron.finished({"dj_cron": garbage})  # no database access is allowed here: it must not query
    assert "not the id of a periodic run" in caplog.text
