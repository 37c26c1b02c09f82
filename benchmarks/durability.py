"""``benchmarks/run --durability fast,ledger``: the cost of each durability level, side by side.

For each level the benchmark process and every ``runjobs`` it starts use that level as
``JOBS["DEFAULT_DURABILITY"]``; the same runs measure ``runjobs --concurrency 2`` throughput, enqueue
one by one (no transaction) and enqueue in one transaction. "replicated" gets a replica of the
private Redis on the same machine, so its figure is the cost of ``WAIT`` on a fast link.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .infra import PrivateRedis, free_port

LEVELS = ("fast", "replicated", "ledger")


def replica_of(primary: PrivateRedis, workdir: Path) -> PrivateRedis:
    """A replica of ``primary`` that has caught up, for the replicated level's WAIT."""
    directory = workdir / "replica"
    directory.mkdir(exist_ok=True)
    replica = PrivateRedis(directory, free_port(primary.port + 1))
    replica.start()
    replica.client.replicaof("127.0.0.1", primary.port)
    return replica


def compare(
    bench: Any, env: dict[str, str], levels: Sequence[str], log: Callable[[str], None]
) -> dict[str, Any]:
    """Run the three measures at each level; returns {level: {measure: value}}."""
    from django.conf import settings

    out: dict[str, Any] = {}
    sizes = bench.sizes
    for level in levels:
        log(f"Durability {level}")
        settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": level}
        env["BENCH_DURABILITY"] = level
        bench.throughput(["runjobs_c2"])
        bench.enqueue_single()
        bench.enqueue_transaction()
        out[level] = {
            "runjobs_c2": bench.results["throughput"].get("runjobs_c2", 0.0),
            "enqueue_single_us": bench.results["enqueue_single"]["django_jobs"] / sizes.enqueue_single * 1e6,
            "enqueue_tx_s": bench.results["enqueue_tx"]["django_jobs"],
        }
    return out


def render(out: dict[str, Any], sizes: Any) -> str:
    base = out.get("fast", next(iter(out.values())))
    lines = [
        f"| level | runjobs c=2 (jobs/s) | vs fast | enqueue one by one (µs/job) | "
        f"enqueue {sizes.enqueue_tx:,} in one atomic() (s) |",
        "|---|---|---|---|---|",
    ]
    for level, row in out.items():
        ratio = row["runjobs_c2"] / base["runjobs_c2"] - 1 if base["runjobs_c2"] else 0.0
        lines.append(
            f"| `{level}` | {row['runjobs_c2']:,.0f} | {ratio:+.1%} | {row['enqueue_single_us']:,.0f} | "
            f"{row['enqueue_tx_s']:.2f} |"
        )
    return "\n".join(lines)
