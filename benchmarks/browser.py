"""``benchmarks/run --only browser``: how long the admin's job browser takes to serve one page of a
large queue and of a large history, and what the history of ended jobs costs a worker.

The queue holds ``--browse-jobs`` ready no-ops (100,000 by default) and the history as many rows;
each page asked for is one in the middle (``start`` = half), served by the admin view through
Django's test client, logged in as a superuser: the median of ``PAGES`` requests each. The page of
a queue reads one slice of the queue's list, so it should take as long with 10 jobs as with 100,000.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from typing import Any

#: Requests per page measured; the median is reported.
PAGES = 20
BATCH = 5000


def measure(bench: Any, size: int) -> dict[str, Any]:
    """Fill the queue and the history, then time a page of each, and of a near-empty queue."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from django_jobs.models import JobHistory

    from .benchapp.jobs import noop

    bench._flush()
    JobHistory.objects.all().delete()
    client = Client()
    user, _ = get_user_model().objects.get_or_create(username="bench", is_staff=True, is_superuser=True)
    client.force_login(user)
    noop.enqueue_many([(i,) for i in range(10)])
    small = _median(client, "?queue=default&tab=ready&start=5")
    for start in range(10, size, BATCH):
        noop.enqueue_many([(i,) for i in range(start, min(start + BATCH, size))])
    now = dt.datetime.now(dt.UTC)
    for start in range(0, size, BATCH):
        JobHistory.objects.bulk_create(
            JobHistory(
                job_id=f"h{i}", job_name="bench.noop", queue="default", state="finished", attempts=1,
                duration=0.001, ended_at=now - dt.timedelta(seconds=i), data=f'["bench.noop",null,[{i}]]',
            )
            for i in range(start, min(start + BATCH, size))
        )  # fmt: skip
    half = size // 2
    found = {
        "size": size,
        "queue_small_ms": small,
        "queue_ms": _median(client, f"?queue=default&tab=ready&start={half}"),
        "history_ms": _median(client, f"?queue=default&tab=history&start={half}"),
    }
    bench._flush()
    JobHistory.objects.all().delete()
    return found


def _median(client: Any, query: str) -> float:
    """The median milliseconds of ``PAGES`` requests of the browser with ``query``."""
    from django.urls import reverse

    url = reverse("admin:django_jobs_job_changelist") + query
    times = []
    for _ in range(PAGES):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200 or b'id="job-list"' not in response.content:
            raise RuntimeError(f"the browser answered {response.status_code} to {query}")
    return statistics.median(times)


def render(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of the results table."""
    size = f"{found['size']:,}"
    return [
        (f"Job browser, a page of a {size}-job queue (median of {PAGES})", f"{found['queue_ms']:.0f} ms"),
        (f"Job browser, a page of a 10-job queue (median of {PAGES})", f"{found['queue_small_ms']:.0f} ms"),
        (f"Job browser, a page of a {size}-row history (median of {PAGES})", f"{found['history_ms']:.0f} ms"),
    ]
