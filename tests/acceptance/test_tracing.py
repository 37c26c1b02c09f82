"""Tracing with a real runjobs: jobs enqueued in a traced request (one in a transaction, through the
outbox, one that fails) run in forked work processes whose spans, batched and flushed as each work
process exits, continue the request's trace."""

from __future__ import annotations

import json
import random
import subprocess

import pytest
from django.test import Client

pytest.importorskip("opentelemetry.sdk", reason="tracing tests need opentelemetry-sdk (the test extra)")

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

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
