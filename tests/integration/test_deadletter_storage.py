"""A dead letter can always be written, on SQLite and PostgreSQL alike, whatever the job held.

PostgreSQL refuses NUL in text and JSON and lone surrogates everywhere, and enforces the width of
each column; the row is written anyway, with the unstorable escaped and the originals kept
losslessly in the raw snapshot.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import surrogate_id, valid_job_id
from django_jobs.testing import run_jobs
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def failure(job_id="j1", **overrides):
    values = {"queue": "default", "reason": "permanent", "exception": "builtins.ValueError", "message": "m"}
    return deadletter.Failure(job_id=job_id, **{**values, **overrides})


def snapshot(entry):
    """The raw snapshot with every value as the exact bytes it stands for."""
    out = {}
    for name, value in json.loads(entry.raw).items():
        if isinstance(value, dict):
            name = base64.b64decode(value["name_base64"]) if "name_base64" in value else name
            out[name] = base64.b64decode(value["base64"])
        else:
            out[name] = value.encode()
    return out


UNSTORABLE = "nul \x00 lone \udc80 \ud800 end"
EARLY = "0001-01-01T00:00:00+14:00"  # before year 1 in UTC: no database column holds it


def test_nul_and_lone_surrogates_everywhere_are_escaped_and_kept_in_the_snapshot():
    data = json.dumps(["tests.record", None, [UNSTORABLE, float("nan")], {UNSTORABLE: UNSTORABLE}])
    fields = {"data": data.encode(), "dj_attempt": b"2", "odd\udcff": b"\xff\x00\xfe"}
    entry = deadletter.record(
        failure(
            exception=UNSTORABLE,
            message=UNSTORABLE,
            traceback=f'File "/x.py", line 1, in {UNSTORABLE}\n',
            history=[{"attempt": 1, "message": UNSTORABLE, "at": EARLY}],
        ),
        fields,
    )
    entry.refresh_from_db()
    escaped = "nul \\x00 lone \\udc80 \\ud800 end"
    assert entry.message == escaped and entry.exception == escaped
    assert entry.args == [escaped, "nan"] and entry.kwargs == {escaped: escaped}
    assert entry.history == [{"attempt": 1, "message": escaped, "at": EARLY}]
    raw = snapshot(entry)
    assert raw["data"] == data.encode()  # the arguments exactly as they were
    assert raw[b"odd\xff"] == b"\xff\x00\xfe"  # a field name and value that are not UTF-8
    assert raw["djjobs:original message"] == UNSTORABLE.encode("utf-8", "surrogatepass")


def test_an_id_of_10_kb_is_filed_under_a_stable_surrogate_once():
    long_id = "x" * 10_000
    first = deadletter.record(failure(long_id), {})
    second = deadletter.record(failure(long_id), {})
    assert first.pk == second.pk and DeadLetter.objects.count() == 1
    assert first.job_id == surrogate_id(long_id.encode())
    assert snapshot(first)["djjobs:original job_id"] == long_id.encode()


def test_enormous_values_are_written_and_the_snapshot_says_what_was_cut():
    huge = b"\xff" * (3 * 1024 * 1024)
    message = "m" * 1_000_000
    data = json.dumps(["n" * 500, None, [], {}]).encode()
    entry = deadletter.record(failure(message=message), {"blob": huge, "data": data})
    entry.refresh_from_db()
    assert len(entry.message) == deadletter.MESSAGE_CHARS and entry.job_name == "n" * 200
    blob = json.loads(entry.raw)["blob"]
    assert (
        blob["bytes"] == len(huge)
        and len(base64.b64decode(blob["base64"])) == deadletter.SNAPSHOT_VALUE_BYTES
    )


@pytest.mark.parametrize(("argument", "escaped"), [("a \x00 b", "a \\x00 b"), ("a \udc80 b", "a \\udc80 b")])
def test_a_job_failing_with_unstorable_text_in_its_message_and_arguments_is_dead_lettered(argument, escaped):
    handle = jobs.fails_with.enqueue(argument)
    run_jobs()
    entry = DeadLetter.objects.get(job_id=handle.id)
    assert entry.args == [escaped]
    assert entry.message == f"bad input: {escaped}"
    assert json.loads(snapshot(entry)["data"])[2] == [argument]  # the original argument


ANY_TEXT = st.text(st.characters(exclude_categories=()))  # NUL and lone surrogates included


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    job_id=ANY_TEXT.filter(lambda t: len(t) <= 80),
    message=ANY_TEXT,
    fields=st.dictionaries(ANY_TEXT.filter(lambda t: len(t) <= 10), st.binary(max_size=50), max_size=4),
    data=st.binary(max_size=80),
    reason=st.one_of(st.sampled_from(DeadLetter.Reason.values), ANY_TEXT),
    attempt=st.integers(),
)
def test_any_failure_is_written(job_id, message, fields, data, reason, attempt):
    planted = {**fields, "data": data, "dj_attempt": str(attempt).encode()}
    entry = deadletter.record(
        failure(job_id, message=message, exception=message[:400], reason=reason), planted
    )
    assert DeadLetter.objects.filter(pk=entry.pk).exists()
    assert valid_job_id(entry.job_id)
    DeadLetter.objects.all().delete()
