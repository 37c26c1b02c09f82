"""A job hash is parsed once into a JobRecord, and whatever it holds, reading it never raises."""

from __future__ import annotations

import datetime as dt

import pytest
import rq.utils
from hypothesis import given
from hypothesis import strategies as st

from django_jobs.store import JobRecord, Status, parse_rq_timestamp, rq_timestamp

FIELDS = ["description", "origin", "status", "dj_attempt", "dj_history", "enqueued_at", "started_at", "data"]


def _read_everything(record: JobRecord) -> None:
    for name in ("created_at", "enqueued_at", "started_at", "ended_at"):
        record.time(name)
    _ = (record.name, record.queue, record.status, record.attempt, record.history, record.worker)
    _ = (record.cron_run, record.data, record.snapshot, record.readable, record.exists)


@given(st.dictionaries(st.sampled_from(FIELDS), st.binary(max_size=40)))
def test_any_bytes_in_any_field_read_without_raising(fields: dict[str, bytes]):
    _read_everything(JobRecord("x", fields))


def test_a_readable_hash_reads_as_rq_wrote_it():
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    record = JobRecord(
        "abc",
        {
            "description": b"tests.record",
            "origin": b"default",
            "status": b"started",
            "dj_attempt": b"2",
            "dj_history": b'[{"attempt": 1}]',
            "enqueued_at": rq_timestamp(when).encode(),
        },
    )
    assert (record.name, record.queue, record.status, record.attempt) == (
        "tests.record",
        "default",
        Status.STARTED,
        2,
    )
    assert record.history == [{"attempt": 1}]
    assert record.time("enqueued_at") == when
    assert record.readable and record.exists


@pytest.mark.parametrize(
    ("field", "value", "attribute", "expected"),
    [
        ("dj_attempt", b"many", "attempt", 0),
        ("dj_attempt", b"1e400", "attempt", 0),
        ("dj_history", b"{not json", "history", []),
        ("dj_history", b'{"a": 1}', "history", []),
        ("dj_history", b"[" * 100_000, "history", []),
        ("status", b"exploded", "status", None),
        ("description", b"\xff\xfename", "name", "\ufffd\ufffdname"),
    ],
)
def test_garbage_in_a_field_reads_as_its_default(field: str, value: bytes, attribute: str, expected: object):
    assert getattr(JobRecord("x", {field: value}), attribute) == expected


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC), "2026-01-02T03:04:05.678000Z"),
        (
            dt.datetime(2026, 1, 1, 1, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "2025-12-31T23:00:00.000000Z",
        ),
        (dt.datetime(2026, 1, 1, 0, 0, 0, 7, tzinfo=dt.UTC), "2026-01-01T00:00:00.000007Z"),
    ],
)
def test_timestamps_are_written_in_rqs_format_in_utc(when: dt.datetime, expected: str):
    assert rq_timestamp(when) == expected == when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert rq.utils.utcparse(expected) == when  # RQ reads it back


@pytest.mark.parametrize("stamp", [b"", b"yesterday", b"2026-13-01T00:00:00.000000Z", b"\xff"])
def test_an_unreadable_timestamp_is_none(stamp: bytes):
    assert parse_rq_timestamp(stamp) is None
    assert JobRecord("x", {"started_at": stamp}).time("started_at") is None


def test_a_key_that_is_not_a_hash_is_an_unreadable_record_that_keeps_what_redis_said():
    record = JobRecord.unreadable("x", "WRONGTYPE Operation against a key holding the wrong kind of value")
    assert not record.readable and not record.exists
    assert record.snapshot["redis_error"].startswith(b"WRONGTYPE")


def test_every_status_the_scripts_write_is_named_once_in_python():
    assert {s.value for s in Status} == {"queued", "started", "scheduled", "finished", "failed", "canceled"}
