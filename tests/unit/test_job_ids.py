"""What a job id may be: RQ's own rule, at most 64 characters (the width of every id column)."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rq.job import JOB_ID_PATTERN

from django_jobs.core.envelope import Envelope
from django_jobs.store import new_job_id, surrogate_id, valid_job_id


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


def test_new_ids_are_uuid7_and_sort_by_creation_across_milliseconds():
    """Time-ordered ids keep every database index on job ids writing at one end (see new_job_id)."""
    earlier = new_job_id()
    time.sleep(0.002)
    later = [new_job_id() for _ in range(1000)]
    assert all(valid_job_id(one) and len(one) == 32 for one in later)
    assert len(set(later)) == 1000  # 74 random bits: no collision within a millisecond
    parsed = uuid.UUID(later[0])
    assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
    assert earlier < min(later)
    assert abs(int(later[0][:12], 16) / 1000 - time.time()) < 5  # its first 48 bits: the Unix time in ms
