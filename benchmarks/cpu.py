"""``benchmarks/run --only cpu``: the CPU time per job of a drain of N no-op jobs by ``runjobs
--concurrency 2 --burst``, split between the supervisor, its work processes and ``redis-server``.

Each run is accounted whole (:meth:`benchmarks.infra.Runner.accounted`): the supervisor's own CPU time
from its exited process, the tree's from ``wait4`` (the work processes are its children, reaped
before it exits), Redis' from ``INFO cpu`` before and after. The same command on an empty queue is
subtracted, so interpreter start-up, Django's set-up and shutdown cancel out.
"""

from __future__ import annotations

import statistics
from typing import Any

from .infra import redis_cpu_seconds

PARTS = ("tree", "supervisor", "work", "redis")


def _run(bench: Any, n: int) -> dict[str, float]:
    """CPU seconds of one drain of ``n`` no-ops (0: an empty queue)."""
    from .scenarios import WORKERS_BY_KEY

    worker = WORKERS_BY_KEY["runjobs_c2"]
    bench._flush()
    ids = bench._enqueue(worker, n, "cpu") if n else []
    before = redis_cpu_seconds(bench.client)
    usage = bench.runner.accounted(bench._argv(worker), bench._timeout(n))
    redis = redis_cpu_seconds(bench.client) - before
    if ids:
        bench._verify(worker, ids)
    return {"tree": usage.tree, "supervisor": usage.own, "work": usage.tree - usage.own, "redis": redis}


def measure(bench: Any) -> dict[str, Any]:
    """µs per job of each part, (full run - empty run) / N, the median of ``repeat`` pairs."""
    n = bench.sizes.cpu_jobs
    runs: list[dict[str, float]] = []
    for rep in range(bench.sizes.repeat):
        full, empty = _run(bench, n), _run(bench, 0)
        runs.append({part: (full[part] - empty[part]) / n * 1e6 for part in PARTS})
        bench.log(
            f"  rep {rep + 1}: "
            + ", ".join(f"{p} {runs[-1][p]:.0f} µs/job" for p in PARTS)
            + "; CPU s (full / empty run): "
            + ", ".join(f"{p} {full[p]:.3f} / {empty[p]:.3f}" for p in PARTS)
        )
    return {"us_per_job": {p: statistics.median(r[p] for r in runs) for p in PARTS}, "runs": runs}


def render(found: dict[str, Any], n: int) -> list[tuple[str, str]]:
    us = found["us_per_job"]
    return [
        (
            f"CPU per job, `runjobs --concurrency 2 --burst` draining {n:,} no-ops, minus an empty run: "
            "runjobs tree (supervisor + work processes) / redis-server",
            f"{us['tree']:.0f} ({us['supervisor']:.0f} + {us['work']:.0f}) / {us['redis']:.0f} µs",
        )
    ]
