"""OpenTelemetry tracing, in process against real Redis and the real database: a request's enqueue and
the job's attempts belong to one trace, through Redis and through the outbox, each attempt one
CONSUMER span with the job's name, queue, attempt and outcome; no trace, no field."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest
from django.db import transaction
from django.test import Client, override_settings

pytest.importorskip("opentelemetry.sdk", reason="tracing tests need opentelemetry-sdk (the test extra)")

from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_jobs.core import execution, outcomes, tracing
from django_jobs.exceptions import WorkerLost
from django_jobs.models import OutboxEntry
from django_jobs.store import Claimed, Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.chaos import DOWN
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _reset_global_provider() -> None:
    """OpenTelemetry sets its provider once per process; its own test helpers reset it like this, so
    that the rest of the suite runs as an application without a provider does."""
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """A configured tracer provider whose finished spans the test reads."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_global_provider()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_global_provider()


def processed(exporter: InMemorySpanExporter, name: str = "tests.record") -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == f"process {name}"]


def request(path: str) -> tuple[str, trace.SpanContext]:
    """GET ``path`` inside a SERVER span, as Django's instrumentation would; the job id and the span."""
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("GET /enqueue/", kind=SpanKind.SERVER) as span:
        response = Client().get(path)
    assert response.status_code == 200
    return response.content.decode(), span.get_span_context()


def test_a_job_enqueued_in_a_traced_request_runs_in_a_span_of_the_requests_trace(spans, redis_db):
    job_id, origin = request("/enqueue/?key=traced")
    carried = json.loads(redis_db.hget(f"rq:job:{job_id}", "dj_trace"))
    assert carried["traceparent"].split("-")[1] == f"{origin.trace_id:032x}"
    assert run_jobs() == 1
    [span] = processed(spans)
    assert span.context.trace_id == origin.trace_id
    assert span.parent is not None and span.parent.span_id == origin.span_id
    assert [link.context.span_id for link in span.links] == [origin.span_id]
    assert span.kind is SpanKind.CONSUMER
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "messaging.system": "django_jobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": job_id,
        "django_jobs.job.name": "tests.record",
        "django_jobs.attempt": 1,
        "django_jobs.outcome": "success",
    }


def test_each_failed_attempt_is_an_error_span_with_its_exception_in_the_same_trace(spans):
    job_id, origin = request("/enqueue/?key=doomed&job=always_fails")
    # FAST: three attempts, each retry due within a fraction of a second
    wait_for(lambda: run_jobs() >= 0 and len(processed(spans, "tests.always_fails")) == 3, timeout=10)
    attempts = processed(spans, "tests.always_fails")
    assert [s.attributes["django_jobs.attempt"] for s in attempts] == [1, 2, 3]
    assert [s.attributes["django_jobs.outcome"] for s in attempts] == ["retry", "retry", "dead"]
    for span in attempts:
        assert span.context.trace_id == origin.trace_id
        assert span.attributes["messaging.message.id"] == job_id
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "upstream down"
        assert span.attributes["error.type"] == "builtins.ConnectionError"
        [event] = span.events
        assert event.name == "exception"
        assert event.attributes["exception.message"] == "upstream down"


def test_an_enqueue_in_a_transaction_keeps_the_context_through_the_outbox(spans, redis_db):
    job_id, origin = request("/enqueue/?key=atomic&atomic=1")
    assert json.loads(redis_db.hget(f"rq:job:{job_id}", "dj_trace"))["traceparent"]
    run_jobs()
    [span] = processed(spans)
    assert (span.context.trace_id, span.parent.span_id) == (origin.trace_id, origin.span_id)


@pytest.mark.usefixtures("fast")
def test_the_outbox_relay_delivers_the_context_of_a_push_that_failed(spans, redis_db):
    with override_settings(RQ_QUEUES={"default": DOWN}):
        job_id, origin = request("/enqueue/?key=relayed&atomic=1")
    [row] = OutboxEntry.objects.all()
    assert json.loads(row.trace)["traceparent"].split("-")[2] == f"{origin.span_id:016x}"
    OutboxEntry.objects.update(created_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    Maintenance(Store(redis_db), ["default"], 0.1).relay.run()
    run_jobs()
    [span] = processed(spans)
    assert span.attributes["messaging.message.id"] == job_id
    assert (span.context.trace_id, span.parent.span_id) == (origin.trace_id, origin.span_id)


def test_no_trace_context_writes_no_field_and_the_attempt_starts_its_own_trace(spans, redis_db):
    handle = jobs.record.enqueue("untraced")
    with transaction.atomic():
        atomic = jobs.record.enqueue("untraced-atomic")
    assert OutboxEntry.objects.filter(trace="").count() == OutboxEntry.objects.count()
    for job_id in (handle.id, atomic.id):
        assert redis_db.hget(f"rq:job:{job_id}", "dj_trace") is None
    run_jobs()
    finished = processed(spans)
    assert len(finished) == 2
    assert all(s.parent is None and not s.links for s in finished)
    assert finished[0].context.trace_id != finished[1].context.trace_id


def test_the_jobs_own_spans_and_baggage_continue_the_enqueuers_trace(spans, restore_registry):
    from django_jobs import job

    seen: dict[str, object] = {}

    @job(name="tests.tracing.nested", timeout=10)
    def nested() -> None:
        with trace.get_tracer("tests").start_as_current_span("inner"):
            seen["tenant"] = baggage.get_baggage("tenant")

    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        with trace.get_tracer("tests").start_as_current_span("enqueuer") as outer:
            nested.enqueue()
    finally:
        context.detach(token)
    run_jobs()
    [attempt] = processed(spans, "tests.tracing.nested")
    [inner] = [s for s in spans.get_finished_spans() if s.name == "inner"]
    assert inner.parent.span_id == attempt.context.span_id
    assert attempt.context.trace_id == outer.get_span_context().trace_id
    assert seen["tenant"] == "acme"


def test_installed_without_a_provider_records_nothing_and_writes_nothing(redis_db):
    _reset_global_provider()
    assert not tracing.active()
    with trace.get_tracer("tests").start_as_current_span("no provider"):
        handle = jobs.record.enqueue("plain")
    assert redis_db.hget(f"rq:job:{handle.id}", "dj_trace") is None
    assert run_jobs() == 1


def test_oversized_baggage_is_left_behind_but_the_trace_context_travels(spans, redis_db):
    token = context.attach(baggage.set_baggage("blob", "x" * (tracing.MAX_CARRIER + 1)))
    try:
        with trace.get_tracer("tests").start_as_current_span("enqueuer") as outer:
            handle = jobs.record.enqueue("big-baggage")
    finally:
        context.detach(token)
    assert set(json.loads(redis_db.hget(f"rq:job:{handle.id}", "dj_trace"))) == {"traceparent"}
    run_jobs()
    [span] = processed(spans)
    assert span.parent.span_id == outer.get_span_context().span_id


@pytest.mark.parametrize("garbage", [b"not json", b"[1, 2]", b'{"traceparent": "00-zz-zz-01"}'])
def test_a_garbage_trace_field_neither_stops_the_job_nor_joins_a_trace(spans, redis_db, garbage):
    handle = jobs.record.enqueue("garbage")
    redis_db.hset(f"rq:job:{handle.id}", "dj_trace", garbage)
    run_jobs()
    [span] = processed(spans)
    assert span.parent is None and not span.links
    assert span.attributes["django_jobs.outcome"] == "success"


def test_an_attempt_whose_work_process_died_gets_its_span_from_the_supervisor(spans, redis_db):
    job_id, origin = request("/enqueue/?key=orphaned")
    store = Store(redis_db)
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n", finished_ttl=60
    )
    assert claimed is not None and claimed.id == job_id
    # What the supervisor does when the work process running it dies: read the job back, settle it,
    # publish the end.
    held = Claimed(claimed.queue, job_id, claimed.token, store.record(job_id))
    outcomes.publish(execution.settle_failure(store, held, WorkerLost("The work process died (pid 1).")))
    [span] = processed(spans)
    assert (span.context.trace_id, span.parent.span_id) == (origin.trace_id, origin.span_id)
    assert span.attributes["django_jobs.outcome"] == "lost"
    assert span.attributes["error.type"] == "django_jobs.exceptions.WorkerLost"
    assert span.status.status_code is StatusCode.ERROR
    assert span.start_time == int(held.record.time("started_at").timestamp() * 1e9) < span.end_time
    run_jobs()  # the retry runs in a work process's span of the same trace
    assert [s.attributes["django_jobs.attempt"] for s in processed(spans)] == [1, 2]
    assert {s.context.trace_id for s in processed(spans)} == {origin.trace_id}


def test_an_undecodable_job_has_one_span_its_dead_letter_attempt(spans, redis_db):
    handle = jobs.record.enqueue("mangled")
    redis_db.hset(f"rq:job:{handle.id}", "data", b"\xff not a payload")
    run_jobs()
    [span] = processed(spans)
    assert span.attributes["django_jobs.outcome"] == "dead"
    assert span.status.status_code is StatusCode.ERROR
