"""Priorities are validated where they are written: at decoration, at options(), and on an envelope."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from django_jobs import job
from django_jobs.core import registry
from django_jobs.core.envelope import Envelope
from django_jobs.exceptions import JobNotFound
from django_jobs.testing import capture_jobs
from django_jobs.workflows.chains import chain
from tests.testapp import jobs

pytestmark = pytest.mark.usefixtures("restore_registry")

RANGE = "priority must be an int from -100 to 100"
BAD = [True, False, 1.0, 5.5, "5", 101, -101, 10**6]


@pytest.mark.parametrize("value", [*BAD, None])
def test_a_bad_priority_fails_at_decoration_naming_the_job(value):
    with pytest.raises(ValueError, match=rf"^@job 'unit.prio.bad': {RANGE}.*got {re.escape(repr(value))}\.$"):
        job(name="unit.prio.bad", timeout=1, priority=value)(lambda: None)
    with pytest.raises(JobNotFound):
        registry.get("unit.prio.bad")


@pytest.mark.parametrize("value", BAD)
def test_a_bad_priority_fails_at_options(value):
    with pytest.raises(ValueError, match=rf"^options\(\): {RANGE}.*got {re.escape(repr(value))}\.$"):
        jobs.record.options(priority=value)


@pytest.mark.parametrize("value", [-100, -1, 0, 1, 100])
def test_the_whole_range_is_accepted(value):
    defined = job(name=f"unit.prio.ok{value}", timeout=1, priority=value)(lambda: None)
    assert defined.priority == value
    assert jobs.record.options(priority=value).settings.priority == value


def test_options_leave_the_priority_to_the_job_unless_given():
    assert jobs.record.options().settings.priority is None
    assert job(name="unit.prio.default", timeout=1)(lambda: None).priority == 0


def test_a_chain_takes_a_priority_for_its_pages():
    started = chain(name="unit.prio.chain", timeout=1, priority=-20)(lambda cursor: None)
    assert started.page.priority == -20
    with pytest.raises(ValueError, match="priority"):
        chain(name="unit.prio.badchain", timeout=1, priority=500)(lambda cursor: None)


def envelope(priority: int) -> Envelope:
    return Envelope(
        "abc", "tests.record", "default", "[]", 10, 0.0, dt.datetime.now(dt.UTC), priority=priority
    )


def test_the_job_hash_records_a_priority_only_when_it_is_not_zero():
    assert "dj_priority" not in envelope(0).fields()
    assert envelope(-7).fields()["dj_priority"] == -7
    assert "priority" not in envelope(-7).options()  # the outbox row has a column for it


def test_an_envelope_refuses_a_priority_out_of_range():
    with pytest.raises(ValueError, match="priority"):
        envelope(101)


def test_capture_mode_records_each_jobs_priority():
    with capture_jobs() as captured:
        jobs.record.enqueue("plain")
        jobs.record.options(priority=-4).enqueue("later")
    assert [(j.args, j.priority) for j in captured] == [(["plain"], 0), (["later"], -4)]
