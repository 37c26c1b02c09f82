"""``runjobs --metrics-port``: one endpoint whose values add up every work process, dead ones included."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.chaos import wait_port
from tests.conftest import wait_for
from tests.observability.conftest import promtool_check_metrics, scrape, value
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_the_endpoint_sums_all_work_processes_and_keeps_counts_of_dead_ones(metered_runjobs, tmp_path: Path):
    worker, port = metered_runjobs("--concurrency", "2")
    wait_port(port)
    url = f"http://127.0.0.1:{port}/metrics"
    # Zero series exist before any job ran, so rate() and increase() see the first event.
    first = scrape(url)
    never_ran = {"job": "tests.always_fails", "queue": "default"}
    assert value(first, "django_jobs_jobs_total", **never_ran, outcome="dead") == 0
    assert value(first, "django_jobs_worker_busy", queue="default") == 0

    jobs.slow.enqueue("long", 2.0)  # holds one work process while the other runs the rest
    wait_for(lambda: value(scrape(url), "django_jobs_worker_busy", queue="default") == 1)
    for key in ("a", "b", "c"):
        jobs.record.enqueue(key)
    wait_for(lambda: SideEffect.objects.filter(key__in=["a", "b", "c"]).count() == 3)
    # A work process killed by its job: its counters must survive it.
    jobs.kill_once.enqueue("k", str(tmp_path / "marker"))
    jobs.sleepy.enqueue("s", 3.0)  # soft timeout, then dead-lettered on its second attempt
    wait_for(lambda: SideEffect.objects.filter(key__in=["long", "k"]).count() == 2)

    def settled() -> str | None:
        text = scrape(url)
        dead = value(text, "django_jobs_jobs_total", job="tests.sleepy", queue="default", outcome="dead")
        return text if dead == 1 else None

    text = str(wait_for(settled))
    for job, outcome, count in [
        ("tests.record", "success", 3),
        ("tests.slow", "success", 1),
        ("tests.kill_once", "success", 1),
        ("tests.kill_once", "lost", 1),
        ("tests.sleepy", "timeout", 1),
        ("tests.sleepy", "dead", 1),
    ]:
        assert value(text, "django_jobs_jobs_total", job=job, queue="default", outcome=outcome) == count, job
    assert value(text, "django_jobs_job_duration_seconds_count", job="tests.record", queue="default") == 3
    assert value(text, "django_jobs_queue_wait_seconds_count", job="tests.record", queue="default") == 3
    slow = value(text, "django_jobs_job_duration_seconds_sum", job="tests.slow", queue="default")
    assert slow is not None and 2.0 <= slow < 5
    # Busy goes back to 0 once every attempt has settled; its settling may trail the counters by a
    # report or a process exit, so it is read until it does (a leaked +1 would never come back).
    wait_for(lambda: value(scrape(url), "django_jobs_worker_busy", queue="default") == 0, timeout=10)
    promtool_check_metrics(text)
    assert worker.terminate() == 0, worker.output()


def test_the_endpoint_goes_away_with_runjobs_and_leaves_no_files(metered_runjobs, tmp_path: Path):
    worker, port = metered_runjobs("--burst")
    assert worker.proc.wait(30) == 0, worker.output()
    wait_port(port, up=False)
    assert not list(tmp_path.glob("django-jobs-metrics-*"))


def test_a_taken_port_is_a_clear_error(metered_runjobs):
    first, port = metered_runjobs()
    wait_port(port)
    second, _ = metered_runjobs(port=port)
    assert second.proc.wait(30) != 0
    assert f"Cannot serve metrics on 127.0.0.1:{port}" in second.output()
    time.sleep(0.2)
    assert first.proc.poll() is None


def test_the_endpoint_reads_the_pause_gauges_of_its_queues_at_scrape_time(metered_runjobs):
    from django_jobs import pause, resume

    worker, port = metered_runjobs("emails")
    wait_port(port)
    url = f"http://127.0.0.1:{port}/metrics"
    assert value(scrape(url), "django_jobs_queue_paused_seconds", queue="emails") == 0
    pause(queue="emails")
    pause(job=jobs.record)
    text = scrape(url)  # no worker has to notice first: the endpoint asks Redis
    assert value(text, "django_jobs_queue_paused_seconds", queue="emails") >= 0
    assert value(text, "django_jobs_job_paused_seconds", job="tests.record") is not None
    assert value(text, "django_jobs_queue_paused_seconds", queue="default") is None  # not its queue
    wait_for(lambda: value(scrape(url), "django_jobs_queue_paused_seconds", queue="emails") > 0)
    promtool_check_metrics(text)
    resume(queue="emails")
    resume(job=jobs.record)
    text = scrape(url)
    assert value(text, "django_jobs_queue_paused_seconds", queue="emails") == 0
    assert value(text, "django_jobs_job_paused_seconds", job="tests.record") is None
    assert worker.terminate() == 0, worker.output()
