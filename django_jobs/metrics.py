"""Prometheus collectors for the worker: per job type, like an endpoint's."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

JOBS_TOTAL = Counter(
    "django_jobs_jobs",
    "Job attempts by outcome (success, retry, dead, timeout, lost).",
    ["job", "queue", "outcome"],
)
DURATION = Histogram(
    "django_jobs_job_duration_seconds",
    "Run time of job attempts.",
    ["job", "queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
QUEUE_WAIT = Histogram(
    "django_jobs_queue_wait_seconds",
    "Time from enqueue to start.",
    ["job", "queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600),
)
BUSY = Gauge(
    "django_jobs_worker_busy", "Worker processes running a job.", ["queue"], multiprocess_mode="livesum"
)


def started(job: str, queue: str, wait: float | None) -> None:
    if wait is not None:
        QUEUE_WAIT.labels(job, queue).observe(wait)
    BUSY.labels(queue).inc()


def finished(job: str, queue: str, outcome: str, duration: float) -> None:
    BUSY.labels(queue).dec()
    JOBS_TOTAL.labels(job, queue, outcome).inc()
    DURATION.labels(job, queue).observe(duration)


def settled(job: str, queue: str, outcome: str) -> None:
    """An outcome decided outside the work process (hard timeout, lost worker)."""
    JOBS_TOTAL.labels(job, queue, outcome).inc()
