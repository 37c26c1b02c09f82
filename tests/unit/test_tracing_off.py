"""Tracing costs nothing without OpenTelemetry: the package is never imported and no job carries a
trace field; installed but without a tracer provider, nothing is traced either."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from django_jobs.client.enqueue import build
from django_jobs.core import tracing
from tests.conftest import ROOT

#: Runs with OpenTelemetry made unimportable (a None entry in sys.modules, as if not installed), loads
#: every module that traces, builds a job and asks the hooks; prints what was imported.
PROBE = """
import sys
sys.modules["opentelemetry"] = None
import django
django.setup()
from django_jobs.client import enqueue
from django_jobs.core import execution, tracing
from django_jobs import testing
from django_jobs.worker import supervisor
envelope = enqueue.build("tests.record", "default", 10, ["k"], {})
assert not tracing.ENABLED and not tracing.active() and tracing.carrier() == ""
assert "dj_trace" not in envelope.fields() and envelope.trace == ""
tracing.flush()
print(sorted(name for name in sys.modules if name.startswith("opentelemetry.")))
"""


def test_without_opentelemetry_nothing_of_it_is_imported_and_no_job_carries_a_trace():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_installed_without_a_tracer_provider_no_attempt_is_traced_and_no_job_carries_a_trace():
    trace = pytest.importorskip("opentelemetry.trace")
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a tracer provider is set in this process")
    assert tracing.ENABLED and not tracing.active()
    with trace.get_tracer("tests").start_as_current_span("not recorded"):
        assert tracing.carrier() == ""
        assert "dj_trace" not in build("tests.record", "default", 10, ["k"], {}).fields()
