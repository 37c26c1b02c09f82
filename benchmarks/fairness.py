"""``benchmarks/run --fairness plain,deferred,keyed``: one tenant's backlog queued ahead of nine others'.

One tenant has ``--fair-big`` jobs (10,000) queued first, then nine tenants ``--fair-small`` jobs (100)
each, and ``runjobs --burst --concurrency 2`` drains them all. Every job sleeps ``--fair-job-ms`` and
appends when it started and ended (its own clock) to a file. The modes differ only in how the jobs are
limited:

* ``plain``: no limit, the queue's FIFO order (``bench.tenant_plain``);
* ``deferred``: one job at a time per tenant without ``limit_key``: a job type per tenant, each with
  ``concurrency=1``, so a job over its limit goes to the scheduled set and comes back 0.5 s later
  (a job type's limit, the mechanism before ``limit_key``);
* ``keyed``: ``@job(concurrency=1, limit_key=...)``: a job over its tenant's limit is parked in its
  tenant's line and woken when the tenant's running job ends.

For each mode: when the small tenants' last job ended and when the big tenant's last job ended
(seconds from the first start), the Redis commands (scripts' included) and Redis CPU per job over the
whole run, how many of the big tenant's jobs started before one it had enqueued earlier, and the most
jobs of one tenant that ran at once.
"""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .benchapp.tenants import tenant_keyed, tenant_plain, tenant_types
from .infra import BenchError, manage, read_counters, redis_cpu_seconds, reset_counters, stop

MODES = ("plain", "deferred", "keyed")
TENANTS = ["big", *(f"small{n}" for n in range(1, 10))]


@dataclass(frozen=True)
class Shape:
    """How big the backlog is, how long each job takes, and how long a mode may run."""

    big: int = 10_000
    small: int = 100
    job_ms: float = 0.0
    cap: float = 900.0


def _definition(mode: str, tenant: int) -> Any:
    return {"plain": tenant_plain, "keyed": tenant_keyed}.get(mode) or tenant_types[tenant]


def enqueue(mode: str, shape: Shape, path: Path) -> dict[str, list[str]]:
    """The big tenant's jobs first, then each small tenant's; returns each tenant's ids in order."""
    ids: dict[str, list[str]] = {}
    for index, tenant in enumerate(TENANTS):
        count = shape.big if index == 0 else shape.small
        calls = [(tenant, n, shape.job_ms, str(path)) for n in range(count)]
        handles = [
            h for start in range(0, len(calls), 5000)
            for h in _definition(mode, index).enqueue_many(calls[start : start + 5000])
        ]  # fmt: skip
        ids[tenant] = [h.id for h in handles]
    return ids


def _ran(path: Path) -> dict[str, list[tuple[float, float, int]]]:
    """(start, end, position in its tenant's enqueue order) of every job that ran, as each job wrote
    them (the job's own clock: hash timestamps are taken before the claim reaches Redis), by tenant,
    first started first."""
    ran: dict[str, list[tuple[float, float, int]]] = {tenant: [] for tenant in TENANTS}
    for line in path.read_text().splitlines() if path.exists() else []:
        tenant, n, start, end = line.split()
        ran[tenant].append((float(start), float(end), int(n)))
    return {tenant: sorted(runs) for tenant, runs in ran.items()}


def _at_once(intervals: Sequence[tuple[float, float, int]]) -> int:
    events = sorted([(start, 1) for start, _, _ in intervals] + [(end, -1) for _, end, _ in intervals])
    return max(itertools.accumulate(step for _, step in events), default=0)


def _drain(bench: Any, cap: float) -> bool:
    """``runjobs --burst --concurrency 2`` until the queue is empty; False if it was stopped at ``cap``."""
    process, log = bench.runner.start(manage("runjobs", "--burst", "--concurrency", "2", "default"))
    try:
        code = process.wait(cap)
    except subprocess.TimeoutExpired:
        stop(process)
        return False
    if code != 0:
        raise BenchError(f"runjobs exited with {code}; see {log}")
    return True


def run_mode(bench: Any, mode: str, shape: Shape) -> dict[str, Any]:
    """One drain of the whole backlog in ``mode`` (or as much as ``shape.cap`` allows); its figures.
    A ``*_done_s`` figure is None when that part of the backlog was not done by the cap."""
    bench._flush()
    path = bench.workdir / f"fairness-{mode}.log"
    path.unlink(missing_ok=True)
    ids = enqueue(mode, shape, path)
    reset_counters(bench.client)
    cpu = redis_cpu_seconds(bench.client)
    finished = _drain(bench, shape.cap)
    cpu = redis_cpu_seconds(bench.client) - cpu
    commands = read_counters(bench.client).commands
    ran = _ran(path)
    done = sum(len(runs) for runs in ran.values())
    if finished and done != sum(len(i) for i in ids.values()):
        raise BenchError(f"runjobs exited with {done} of {sum(len(i) for i in ids.values())} jobs run")
    first = min(start for runs in ran.values() for start, _, _ in runs)
    small_done = all(len(ran[t]) == len(ids[t]) for t in TENANTS[1:])
    big, small_end = ran["big"], max(end for t in TENANTS[1:] for _, end, _ in ran[t])
    return {
        "small_done_s": small_end - first if small_done else None,
        "big_done_s": max(end for _, end, _ in big) - first if finished else None,
        "big_done": len(big),
        "seconds": shape.cap,
        "commands_per_job": commands / done,
        "redis_cpu_us_per_job": cpu / done * 1e6,
        "big_out_of_order": sum(1 for (_, _, a), (_, _, b) in itertools.pairwise(big) if b < a),
        "most_at_once": max(_at_once(runs) for runs in ran.values()),
    }


def compare(bench: Any, modes: Sequence[str], shape: Shape, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        log(f"Fairness {mode}")
        try:
            out[mode] = run_mode(bench, mode, shape)
        except BenchError as exc:
            log(f"  FAILED: {exc}")
            bench.failures.append(f"fairness {mode}: {str(exc).splitlines()[0]}")
            continue
        log(f"  {out[mode]}")
    return out


def render(out: dict[str, Any], shape: Shape) -> str:
    lines = [
        f"One tenant's {shape.big:,} jobs queued ahead of nine tenants' {shape.small:,} each; each job "
        f"sleeps {shape.job_ms:g} ms; `runjobs --burst --concurrency 2`.",
        "",
        "| mode | small tenants done (s) | big tenant done (s) | Redis commands / job | "
        "Redis CPU / job (µs) | big tenant's jobs out of order | most of one tenant at once |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, row in out.items():
        small = "not done" if row["small_done_s"] is None else f"{row['small_done_s']:.1f}"
        big = f"{row['big_done_s']:.1f}" if row["big_done_s"] is not None else (
            f"{row['big_done']:,} of {shape.big:,} done in {row['seconds']:.0f}"
        )  # fmt: skip
        cost = f"{row['commands_per_job']:.1f} | {row['redis_cpu_us_per_job']:.0f}"
        order = f"{row['big_out_of_order']:,} | {row['most_at_once']}"
        lines.append(f"| `{mode}` | {small} | {big} | {cost} | {order} |")
    return "\n".join(lines)
