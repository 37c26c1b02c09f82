"""The test modes behind :mod:`django_jobs.testing`: capture, immediate, and run_jobs, which drains
Redis in-process through the worker's own code path."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings
from django.test import override_settings

from django_jobs.client.backends import capture
from django_jobs.client.backends.capture import Captured, CapturedJob
from django_jobs.conf import jobs_settings
from django_jobs.core import execution, registry
from django_jobs.core.connections import by_server, home, queue_configs, store_of
from django_jobs.flow.pausing import Held
from django_jobs.store import Finished, Store, browse
from django_jobs.telemetry import history, stats

__all__ = ["Captured", "CapturedJob", "capture_jobs", "immediate_jobs", "run_jobs"]
#: Scheduled jobs of a queue moved onto it per round of ``run_jobs(retries=True)``.
BATCH = 1000


@contextlib.contextmanager
def capture_jobs() -> Iterator[Captured]:
    """``with capture_jobs() as jobs:`` - jobs enqueued inside are recorded, not queued."""
    captured = Captured()
    capture.active.append(captured)
    try:
        with override_settings(JOBS={**_jobs_setting(), "MODE": "capture"}):
            yield captured
    finally:
        capture.active.remove(captured)


@contextlib.contextmanager
def immediate_jobs() -> Iterator[None]:
    """``with immediate_jobs():`` - jobs run inline when enqueued (or at commit)."""
    with override_settings(JOBS={**_jobs_setting(), "MODE": "immediate"}):
        yield


def _jobs_setting() -> dict[str, Any]:
    return dict(getattr(settings, "JOBS", None) or {})


def run_jobs(queues: Sequence[str] | None = None, *, limit: int = 10_000, retries: bool = False) -> int:
    """Run the jobs waiting in Redis now, in this process, through the worker's own code path.

    Due retries and delayed jobs are promoted first. There is no hard timeout here (no
    supervisor), but the soft timeout still applies. Paused queues and job types wait, as they do
    for ``runjobs``. Queues on several Redis servers are run one server after the other, in the order
    of their first queue. Returns the number of attempts run.

    ``retries``: fast-forward time. What waits for its time (a retry's backoff, a snooze, a delay) is
    moved onto its queue at once and run, round after round, until nothing waits or ``limit``
    attempts ran: a job that succeeds on its third attempt is tested in one call, without sleeping.

    Inside a test's transaction (``TestCase``, pytest-django's ``db``) the jobs run in it, on the
    test's connection, which is left open: only a connection the jobs themselves opened or broke is
    closed between them, as a worker closes its own.
    """
    ran = 0
    caller = execution.caller_transactions()
    names = list(queues or queue_configs())
    while True:
        for group in by_server(names):
            ran += _run_server(store_of(group[0]), group, limit - ran, caller)
        if not retries or ran >= limit or not _due_now(names):
            break
    stats.flush(home, every=0)
    history.flush(every=0)
    return ran


def _due_now(names: Sequence[str]) -> int:
    """Move every scheduled job of these queues onto its queue now (the lifecycle's "run now"); how
    many moved."""
    moved = 0
    for queue in names:
        store = store_of(queue)
        waiting, _ = browse.ids(store, queue, browse.Listing.SCHEDULED, 0, BATCH)
        moved += sum(store.run_now(job_id, queue) == 1 for job_id in waiting)
    return moved


def _run_server(store: Store, names: list[str], limit: int, caller: frozenset[str]) -> int:
    """:func:`run_jobs` on the queues of one Redis server."""
    store.maintain(names, registry.limits_json())
    ran = 0
    plan = Held(store, names).claim()  # every high-priority set is asked: run_jobs' order is exact
    finished: Finished | None = None
    while ran < limit:
        claim = store.complete_and_claim(
            plan.queues,
            finished=finished,
            worker_name="django_jobs.testing",
            lease_seconds=jobs_settings.LEASE_SECONDS,
            nonce=f"t{ran}",
            finished_ttl=jobs_settings.FINISHED_TTL,
            limits=plan.limits,
        )
        execution.publish_expired(store, claim.expired)
        claimed = claim.claimed
        if claimed is None:
            break
        ran += 1
        finished = execution.completion(execution.run(store, claimed, caller=caller))
    if finished is not None:
        store.complete(finished, jobs_settings.FINISHED_TTL)
    return ran
