"""Tracing with a real runjobs: jobs enqueued in a traced request (one in a transaction, through the
outbox, one that fails) run in forked work processes whose spans, batched and flushed as each work
process exits, continue the request's trace."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import Client

pytest.importorskip("opentelemetry.sdk", reason="tracing tests need opentelemetry-sdk (the test extra)")

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_a_requests_jobs_run_by_runjobs_are_spans_of_the_requests_trace(runjobs, tmp_path):
    # The request's context as Django's instrumentation would make it current; no provider needed here.
    origin = SpanContext(
        random.getrandbits(128), random.getrandbits(64), False, TraceFlags(TraceFlags.SAMPLED)
    )
    client = Client()
    with trace.use_span(NonRecordingSpan(origin)):
        ids = {
            client.get("/enqueue/?key=plain").content.decode(): "tests.record",
            client.get("/enqueue/?key=atomic&atomic=1").content.decode(): "tests.record",
            client.get("/enqueue/?key=doomed&job=always_fails").content.decode(): "tests.always_fails",
        }
    path = tmp_path / "spans.jsonl"
    worker = runjobs("--burst", "--concurrency", "2", extra_env={"JOBS_TEST_OTEL_SPANS": str(path)})
    try:
        assert worker.proc.wait(60) == 0, worker.output()
    except subprocess.TimeoutExpired:
        raise AssertionError(f"runjobs --burst still running:\n{worker.output()}") from None

    spans = [json.loads(line) for line in path.read_text().splitlines()]
    attempts = {
        (s["attributes"]["messaging.message.id"], s["attributes"]["django_jobs.attempt"]): s for s in spans
    }
    assert sorted(attempts) == sorted(
        [*((i, 1) for i in ids), *((i, n) for i in ids if "fails" in ids[i] for n in (2, 3))]
    )
    for (job_id, _attempt), span in attempts.items():
        assert span["name"] == f"process {ids[job_id]}"
        assert span["kind"] == "SpanKind.CONSUMER"
        assert span["context"]["trace_id"] == f"0x{origin.trace_id:032x}"
        assert span["parent_id"] == f"0x{origin.span_id:016x}"
        failed = ids[job_id] == "tests.always_fails"
        assert span["status"]["status_code"] == ("ERROR" if failed else "UNSET")
        assert span["attributes"]["django_jobs.outcome"] in (("retry", "dead") if failed else ("success",))


def successes(redis_db: redis.Redis, name: str) -> int:
    """The successes of job type ``name`` the hourly counts hold."""
    return sum(int(redis_db.hget(key, f"{name}|success") or 0) for key in redis_db.keys("djjobs:stats:h:*"))


def spans_of(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The exported spans by job id (none yet: {})."""
    lines = path.read_text().splitlines() if path.exists() else []
    found: dict[str, list[dict]] = {}
    for span in map(json.loads, lines):
        found.setdefault(span["attributes"]["messaging.message.id"], []).append(span)
    return found


def test_a_success_whose_work_process_died_before_publishing_it_is_counted_logged_and_traced(
    runjobs, redis_db, tmp_path
):
    path = tmp_path / "spans.jsonl"
    env = {"JOBS_TEST_DIE_AFTER_RETURN": "1", "JOBS_TEST_OTEL_SPANS": str(path), "JOBS_TEST_LOG": "INFO"}
    worker = runjobs("--concurrency", "1", extra_env=env)
    handle = jobs.dies_after_return.enqueue("returned")
    wait_for(lambda: redis_db.hget(f"rq:job:{handle.id}", "status") == b"finished")
    wait_for(lambda: handle.id in spans_of(path))
    (span,) = spans_of(path)[handle.id]  # the supervisor's, from the attempt's start to its end
    assert span["attributes"]["django_jobs.outcome"] == "success"
    assert span["status"]["status_code"] == "UNSET"
    wait_for(lambda: f"job_id={handle.id} queue=default attempt=1 outcome=success" in worker.output())
    wait_for(lambda: successes(redis_db, "tests.dies_after_return") == 1)  # the dashboard's hourly count


def test_the_spans_of_jobs_that_ended_before_their_work_process_was_killed_are_exported(runjobs, tmp_path):
    path = tmp_path / "spans.jsonl"
    before = [jobs.record.enqueue(f"before-{i}").id for i in range(3)]
    killed = jobs.stubborn.enqueue("killed").id  # runs past its timeout: SIGKILLed by the supervisor
    runjobs("--concurrency", "1", extra_env={"JOBS_TEST_OTEL_SPANS": str(path)})
    wait_for(
        lambda: "timeout" in [s["attributes"]["django_jobs.outcome"] for s in spans_of(path).get(killed, [])]
    )
    found = spans_of(path)
    assert all(len(found.get(job_id, [])) == 1 for job_id in before), found.keys()
