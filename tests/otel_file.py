"""A tracer provider for runjobs subprocesses whose spans a test reads back: each finished span one
JSON line appended to a file. The settings install it when ``JOBS_TEST_OTEL_SPANS`` names the file."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class FileSpanExporter(SpanExporter):
    """Appends one line per span; O_APPEND keeps the lines of several work processes whole."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(json.loads(span.to_json())) + "\n" for span in spans)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return SpanExportResult.SUCCESS


def install(path: str) -> None:
    """Batching, as production does: a work process must flush before it exits for its spans to land."""
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(path)))
    trace.set_tracer_provider(provider)
