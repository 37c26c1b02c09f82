"""``benchmarks/run --only io``: an I/O-bound load, jobs that wait 50 ms, at two processes.

``runjobs --concurrency 2`` runs ``bench.wait`` (``time.sleep``) and ``bench.wait_async`` (``await
asyncio.sleep``); when ``runjobs --help`` lists ``--async-jobs``, the async job also runs with
``--async-jobs 50`` (async jobs run concurrently inside each work process). Beside them, the peers at
two processes (one for gevent): Celery prefork ``-c 2``, Celery gevent ``-c 100`` (its ``time.sleep``
is monkey-patched), Dramatiq ``-p 2 -t 8`` and two django-tasks-db ``db_worker``s.

Each runner drains as many jobs as it runs at once times ``--io-per-slot``, so each run lasts about
as long (``benchmarks/peers.py``, :func:`~benchmarks.peers.drain`); the figures are jobs/s and jobs/s
per GiB of the peak resident memory of all the runner's processes.
"""

from __future__ import annotations

import subprocess
from typing import Any

from . import peers
from .infra import manage

ASYNC_JOBS = 50


def async_jobs_option(bench: Any) -> bool:
    """Whether this ``runjobs`` has ``--async-jobs`` (asked at run time: the option may not exist)."""
    out = subprocess.run(
        manage("runjobs", "--help"), env=bench.runner.env, capture_output=True, text=True, timeout=120
    )
    return "--async-jobs" in out.stdout


def contenders(bench: Any, side: peers.PeerSide) -> list[peers.Contender]:
    label = "`runjobs --concurrency 2`"
    found = [
        peers.runjobs(bench, "runjobs_sync", f"{label}, `bench.wait` (sync)"),
        peers.runjobs(bench, "runjobs_async", f"{label}, `bench.wait_async` (async def)"),
    ]
    if async_jobs_option(bench):
        extra = ("--async-jobs", str(ASYNC_JOBS))
        found.append(
            peers.runjobs(
                bench,
                "runjobs_async_jobs",
                f"`runjobs --concurrency 2 --async-jobs {ASYNC_JOBS}`, `bench.wait_async`",
                *extra,
                slots=2 * ASYNC_JOBS,
            )
        )
    if side.python is not None:
        found += [
            peers.celery(bench, side, "prefork", 2),
            peers.celery(bench, side, "gevent", 100),
            peers.dramatiq(bench, side, 8),
            peers.db_worker(bench, side),
        ]
    return found


def measure(bench: Any, side: peers.PeerSide, per_slot: int) -> dict[str, Any]:
    runners = contenders(bench, side)
    runs = peers.run_all(
        bench,
        runners,
        lambda c: "wait_async" if c.key.startswith("runjobs_async") else "wait",
        lambda c: c.slots * per_slot,
    )
    return {"runs": runs, "labels": {c.key: c.label for c in runners}, "peers": side.describe()}


def render(found: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for key, run in found["runs"].items():
        per_gib = run["jobs_s"] / (run["peak_rss_mib"] / 1024)
        rows.append(
            (
                f"I/O-bound (50 ms wait), {found['labels'][key]}, {run['jobs']:,} jobs: "
                "jobs/s; peak RSS (processes); jobs/s per GiB",
                f"{run['jobs_s']:,.0f}; {run['peak_rss_mib']:,.0f} MiB ({run['processes']}); {per_gib:,.0f}",
            )
        )
    return rows
