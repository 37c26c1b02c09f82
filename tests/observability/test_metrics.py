"""The worker's metrics, process-local by default and summed over forked processes when exported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from django_jobs.telemetry import metrics
from tests.conftest import ROOT
from tests.observability.conftest import samples, value

# Runs in a fresh interpreter: switching prometheus_client to multi-process mode is for good.
FORKING = """
import json, os, sys
import django
django.setup()
from prometheus_client import generate_latest
from django_jobs.telemetry import metrics

directory = sys.argv[1]
metrics.use_multiprocess(directory)
metrics.settled("tests.record", "default", "lost")  # the supervisor's own count
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        metrics.started("tests.record", "default", 0.5)
        metrics.finished("tests.record", "default", "success", 0.2)
        metrics.started("tests.record", "default", None)  # dies busy
        os._exit(0)
    os.waitpid(pid, 0)
    children.append(pid)
open(os.path.join(directory, "counter_999999.db"), "wb").close()  # a process creating its file right now
before = generate_latest(metrics.registry()).decode()
for pid in children:
    metrics.retire(pid)
after = generate_latest(metrics.registry()).decode()
files = sorted(os.listdir(directory))
print(json.dumps({"before": before, "after": after, "children": children, "files": files}))
"""


def test_in_process_the_metrics_are_plain_process_local_values():
    local = CollectorRegistry()  # the default registry also holds the web side's gauges
    for metric in (metrics.JOBS_TOTAL, metrics.QUEUE_WAIT, metrics.BUSY):
        local.register(metric)
    labels = {"job": "tests.in_process", "queue": "default"}
    busy = local.get_sample_value("django_jobs_worker_busy", {"queue": "default"}) or 0.0  # other tests' ends
    metrics.started("tests.in_process", "default", 0.25)
    assert local.get_sample_value("django_jobs_worker_busy", {"queue": "default"}) == busy + 1
    metrics.finished("tests.in_process", "default", "success", 0.01)
    metrics.settled("tests.in_process", "default", "lost")
    assert local.get_sample_value("django_jobs_jobs_total", {**labels, "outcome": "success"}) == 1
    assert local.get_sample_value("django_jobs_jobs_total", {**labels, "outcome": "lost"}) == 1
    assert local.get_sample_value("django_jobs_queue_wait_seconds_sum", labels) == 0.25
    metrics.retire(os.getpid())  # nothing to fold outside multi-process mode


def test_forked_processes_add_up_and_exited_ones_are_folded_without_losing_counts(tmp_path: Path):
    run = subprocess.run(
        [sys.executable, "-c", FORKING, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr.decode()
    result = json.loads(run.stdout)
    labels = {"job": "tests.record", "queue": "default"}
    for text in (result["before"], result["after"]):
        assert value(text, "django_jobs_jobs_total", **labels, outcome="success") == 3
        assert value(text, "django_jobs_jobs_total", **labels, outcome="lost") == 1
        assert value(text, "django_jobs_job_duration_seconds_count", **labels) == 3
        assert value(text, "django_jobs_job_duration_seconds_bucket", **labels, le="0.25") == 3
        assert value(text, "django_jobs_job_duration_seconds_bucket", **labels, le="0.1") == 0
        assert value(text, "django_jobs_queue_wait_seconds_sum", **labels) == 1.5
    # Exited processes stop counting as busy; the folded totals replace their files.
    assert value(result["before"], "django_jobs_worker_busy", queue="default") == 3
    assert value(result["after"], "django_jobs_worker_busy", queue="default") is None
    assert samples(result["before"]).keys() - samples(result["after"]).keys() == {
        ("django_jobs_worker_busy", frozenset({("queue", "default")}))
    }
    assert "counter_retired.db" in result["files"] and "histogram_retired.db" in result["files"]
    assert not [f for f in result["files"] for pid in result["children"] if f"_{pid}." in f]
    assert "counter_999999.db" in result["files"]  # a file still empty: left out of the sums, not an error
