"""OpenTelemetry, when it is installed: the enqueuer's trace context travels in the job, and each
attempt runs in a CONSUMER span that continues that trace.

Everything OpenTelemetry lives here. Without the package nothing is imported and every hook returns at
once; with it but no tracer provider set (``ProxyTracerProvider``), an enqueue checks the current
span and an attempt checks the provider, and neither does more.

The context rides in the job hash's ``dj_trace`` (the propagator's carrier as JSON, written only when
the enqueue happens inside a valid span) and in the outbox row's ``trace`` column, so an enqueue
inside a transaction keeps it. The attempt's span is a child of that context, as OpenTelemetry's
messaging conventions allow for a message processed on its own and as the Celery instrumentation
does, so the request's trace shows its jobs; it also links to it, as the conventions recommend.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from django_jobs.core.outcomes import AttemptEnded, Outcome, Subscriber
from django_jobs.store import Claimed

#: Found once at import: no per-job lookup, and no import at all when the package is absent.
ENABLED = find_spec("opentelemetry") is not None and find_spec("opentelemetry.trace") is not None

if ENABLED or TYPE_CHECKING:
    from opentelemetry import context, propagate, trace

#: A carrier longer than this (large baggage) keeps only the W3C trace context itself.
MAX_CARRIER = 2048
_W3C = ("traceparent", "tracestate")
#: What an attempt that did not succeed records as its span's error.
_FAILED = frozenset({Outcome.RETRY, Outcome.DEAD, Outcome.TIMEOUT, Outcome.LOST})


def carrier() -> str:
    """The current trace context as a job carries it, or "" outside a valid span (or without
    OpenTelemetry): a job enqueued outside any trace stores nothing."""
    if not ENABLED or not trace.get_current_span().get_span_context().is_valid:
        return ""
    headers: dict[str, str] = {}
    propagate.inject(headers)
    text = json.dumps(headers, separators=(",", ":"))
    if len(text) > MAX_CARRIER:
        text = json.dumps({k: v for k, v in headers.items() if k in _W3C}, separators=(",", ":"))
    return text if len(text) <= MAX_CARRIER else ""


def active() -> bool:
    """True when an attempt's span would be recorded: OpenTelemetry installed and a provider set."""
    return ENABLED and not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def _carried(raw: bytes) -> dict[str, str]:
    """The carrier in a job's ``dj_trace``: {} when missing or garbage (a job's own field must not
    stop its attempt)."""
    try:
        value = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _attributes(claimed: Claimed) -> dict[str, Any]:
    return {
        "messaging.system": "django_jobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": claimed.queue,
        "messaging.message.id": claimed.id,
        "django_jobs.job.name": claimed.record.name,
        "django_jobs.attempt": claimed.attempt,
    }


class AttemptSpan:
    """The span of one running attempt; :meth:`ended` records how it ended."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span

    def ended(self, event: AttemptEnded) -> None:
        self.span.set_attribute("django_jobs.outcome", event.outcome.value)
        if event.outcome not in _FAILED:
            return
        judgement = event.judgement
        if judgement is not None:
            self.span.set_attribute("error.type", judgement.exception)
        if event.exception is not None:
            self.span.record_exception(event.exception)
        message = judgement.message if judgement is not None else event.outcome.value
        self.span.set_status(trace.Status(trace.StatusCode.ERROR, message[:500]))


def _origin(claimed: Claimed) -> tuple[context.Context, list[trace.Link]]:
    """The enqueuer's context (an empty one if the job carries none) and the link to its span."""
    parent = propagate.extract(_carried(claimed.record.trace), context=context.Context())
    origin = trace.get_current_span(parent).get_span_context()
    return parent, [trace.Link(origin)] if origin.is_valid else []


def _name(claimed: Claimed) -> str:
    return f"process {claimed.record.name or '(unknown)'}"


#: Set while an attempt runs in its span here, so :func:`on_attempt_ended` leaves its end to it.
_attempting: ContextVar[bool] = ContextVar("django_jobs_attempt_span", default=False)


@contextlib.contextmanager
def attempt(claimed: Claimed) -> Iterator[AttemptSpan]:
    """Run one attempt in its span, the enqueuer's context (baggage too) current around it, so the
    job's own spans and log lines belong to the enqueuer's trace. Call only when :func:`active`."""
    parent, links = _origin(claimed)
    tracer = trace.get_tracer("django_jobs")
    token, inside = context.attach(parent), _attempting.set(True)
    try:
        with tracer.start_as_current_span(
            _name(claimed), kind=trace.SpanKind.CONSUMER, attributes=_attributes(claimed), links=links
        ) as span:  # what escapes it is a fault in settling, recorded as the span's error
            yield AttemptSpan(span)
    finally:
        _attempting.reset(inside)
        context.detach(token)


def on_attempt_ended(event: AttemptEnded) -> None:
    """An outcome subscriber: the span of an attempt settled outside its work process (killed by the
    hard timeout, a dead work process, an expired lease), from its start to now; the process that ran
    it took its own span with it. An attempt that ended in its process is published inside its own span
    (``_attempting``); a job that expired never had an attempt, so it gets no span."""
    if event.outcome is Outcome.EXPIRED or _attempting.get() or not active():
        return
    started = event.claimed.record.time("started_at")
    parent, links = _origin(event.claimed)
    span = trace.get_tracer("django_jobs").start_span(
        _name(event.claimed),
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=_attributes(event.claimed),
        links=links,
        start_time=int(started.timestamp() * 1e9) if started else None,
    )
    AttemptSpan(span).ended(event)
    span.end()


#: For the outcome pipeline: none without OpenTelemetry, so no attempt pays a call for it.
SUBSCRIBERS: tuple[tuple[str, Subscriber], ...] = (
    (("Tracing an attempt settled elsewhere", on_attempt_ended),) if ENABLED else ()
)


#: How long a work process waits, at each job's end, for its span to be exported: a SIGKILL (a hard
#: timeout, a cancel kill, a fence) would lose the spans a batching processor still holds; an exporter
#: that does not answer costs each job this much at most.
FLUSH_MILLIS = 100


def flush(timeout_millis: int = 5000) -> None:
    """Export what the provider still buffers: a work process ends with ``os._exit``, which runs no
    exit handler, so a batching span processor would otherwise lose its last spans."""
    if not ENABLED:
        return
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(force_flush):
        with contextlib.suppress(Exception):
            force_flush(timeout_millis)
