"""What a job id may be: RQ's own rule, at most 64 characters (the width of every id column)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rq.job import JOB_ID_PATTERN

from django_jobs.core.envelope import Envelope
from django_jobs.store import surrogate_id, valid_job_id


@pytest.mark.parametrize("job_id", [uuid.uuid4().hex, str(uuid.uuid4()), "a", "A_b-9", "x" * 64])
def test_ids_we_and_rq_make_are_valid(job_id):
    assert valid_job_id(job_id)


# The last two: Arabic-Indic digits and a full-width a, which are not ASCII.
NOT_IDS = ["", "x" * 65, "a:b", "a b", "a/b", "é", "a\n", "a\x00", "\udc80", "١٢٣", "\uff41"]


@pytest.mark.parametrize("job_id", NOT_IDS)
def test_anything_else_is_not(job_id):
    assert not valid_job_id(job_id)


@given(st.text(max_size=70))
def test_the_rule_is_rqs_with_a_length_limit(job_id):
    assert valid_job_id(job_id) == (bool(JOB_ID_PATTERN.fullmatch(job_id)) and len(job_id) <= 64)


def test_surrogates_are_valid_and_stable():
    assert valid_job_id(surrogate_id(b"\xff" * 10_000))
    assert surrogate_id(b"\xff") == surrogate_id(b"\xff") != surrogate_id(b"\xfe")


def test_an_envelope_refuses_an_invalid_id():
    with pytest.raises(ValueError, match="not valid"):
        Envelope("a:b", "tests.record", "default", "[]", 10, 0.0, dt.datetime.now(dt.UTC))
