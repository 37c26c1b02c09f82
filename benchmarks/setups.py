"""``benchmarks/run --only setups``: what a durability level or a second Redis server costs, side by
side with "fast" on one server, in the same process tree.

* ``fast``: the default level on one Redis: the baseline of every ratio;
* ``two-servers``: the queues ``default`` and ``second`` on two Redis servers, one ``runjobs`` serving
  both; every measure spreads its jobs evenly over the two (enqueues alternate between them);
* ``replicated``: one Redis with a replica on this machine, so its figure is the cost of ``WAIT`` on
  a fast link (the replica is started for this setup only);
* ``ledger``: one Redis, every job's outbox row kept until the job has finished;
* ``no-history``: ``ledger`` (the default level) with ``JOBS["HISTORY"]`` off: against ``ledger``, what
  the history of ended jobs costs.

Each setup measures ``runjobs --concurrency 2`` throughput, enqueue one by one (no transaction),
enqueue in one transaction and the enqueue-to-start latency of an idle ``runjobs``. The benchmark
process and every ``runjobs`` it starts get the setup's settings (``BENCH_DURABILITY``,
``BENCH_SECOND_REDIS_URL``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .infra import PrivateRedis, free_port, wait_until

SETUPS = ("fast", "two-servers", "replicated", "ledger", "no-history")
SECOND = "second"


def _private(workdir: Path, name: str, near: int) -> PrivateRedis:
    directory = workdir / name
    directory.mkdir(exist_ok=True)
    server = PrivateRedis(directory, free_port(near))
    server.start()
    return server


@contextlib.contextmanager
def replica_of(primary: PrivateRedis, workdir: Path) -> Iterator[PrivateRedis]:
    """A replica of ``primary``, caught up (online) before it is used, stopped afterwards."""
    replica = _private(workdir, "replica", primary.port + 1)
    try:
        replica.client.replicaof("127.0.0.1", primary.port)
        wait_until(
            lambda: primary.client.info("replication").get("slave0", {}).get("state") == "online",
            30,
            "the replica to catch up",
        )
        yield replica
    finally:
        replica.stop()


@contextlib.contextmanager
def setup(bench: Any, env: dict[str, str], name: str) -> Iterator[None]:
    """The settings (and servers) of one setup, here and in the ``runjobs`` it starts."""
    from django.conf import settings

    from .scenarios import QUEUE  # needs Django set up

    saved_jobs, saved_queues = settings.JOBS, settings.RQ_QUEUES
    level = {"two-servers": "fast", "no-history": "ledger"}.get(name, name)
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": level, "HISTORY": name != "no-history"}
    env["BENCH_DURABILITY"] = level
    env["BENCH_HISTORY"] = "0" if name == "no-history" else "1"
    with contextlib.ExitStack() as stack:
        if name == "replicated":
            stack.enter_context(replica_of(bench.redis, bench.workdir))
        if name == "two-servers":
            second = _private(bench.workdir, SECOND, bench.redis.port + 2)
            stack.callback(second.stop)
            env["BENCH_SECOND_REDIS_URL"] = second.url
            settings.RQ_QUEUES = {**saved_queues, SECOND: {**saved_queues[QUEUE], "URL": second.url}}
            bench.servers = {QUEUE: bench.redis, SECOND: second}
        try:
            yield
        finally:
            settings.JOBS, settings.RQ_QUEUES = saved_jobs, saved_queues
            env.pop("BENCH_DURABILITY", None)
            env.pop("BENCH_HISTORY", None)
            env.pop("BENCH_SECOND_REDIS_URL", None)
            bench.servers = {QUEUE: bench.redis}


def compare(
    bench: Any, env: dict[str, str], names: Sequence[str], log: Callable[[str], None]
) -> dict[str, Any]:
    """Run the four measures in each setup; returns {setup: {measure: median}}. The setups take
    turns, one run each per repetition, so a machine that gets busier or quieter moves them all
    alike. The other sections' results are left as they were."""
    sizes, kept = bench.sizes, dict(bench.results)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    bench.sizes = dataclasses.replace(sizes, repeat=1)
    _empty_history()  # each setup starts from the same table, not one its earlier runs filled
    try:
        for rep in range(sizes.repeat):
            for name in names:
                log(f"Setup {name}, run {rep + 1} of {sizes.repeat}")
                with setup(bench, env, name):
                    runs[name].append(_measure(bench))
    finally:
        bench.sizes = sizes
        bench.results.clear()
        bench.results.update(kept)
    return {
        name: {key: statistics.median(run[key] for run in rows) for key in rows[0]}
        for name, rows in runs.items()
        if rows
    }


def _empty_history() -> None:
    """Empty the history table (TRUNCATE where the database has it: no dead rows left behind)."""
    from django.db import connection

    from django_jobs.models import JobHistory

    table = connection.ops.quote_name(JobHistory._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"{'TRUNCATE' if connection.vendor == 'postgresql' else 'DELETE FROM'} {table}")


def _measure(bench: Any) -> dict[str, float]:
    """One run of each measure in the current setup."""
    bench.throughput(["runjobs_c2"], wall=False)
    bench.enqueue_single(rq=False)
    bench.enqueue_transaction(rq=False)
    bench.latency(due=False)
    results = bench.results
    return {
        "runjobs_c2": results["throughput"].get("runjobs_c2", 0.0),
        "enqueue_single_us": results["enqueue_single"]["django_jobs"] / bench.sizes.enqueue_single * 1e6,
        "enqueue_single_round_trips": results["enqueue_single_redis"]["django_jobs"]["round_trips"],
        "enqueue_tx_s": results["enqueue_tx"]["django_jobs"],
        "latency_p50_ms": results["latency"]["p50_ms"],
        "latency_p99_ms": results["latency"]["p99_ms"],
    }


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}x" if base else "n/a"


def render(out: dict[str, Any], sizes: Any) -> str:
    """One row per setup, each measure with its ratio to "fast" (on one server; else the first setup
    run) beside it."""
    first = "fast" if "fast" in out else next(iter(out))
    base = out[first]
    lines = [
        f"| setup | runjobs c=2 (jobs/s) | vs {first} | enqueue one by one (µs/job; round trips) | "
        f"vs {first} | enqueue {sizes.enqueue_tx:,} in one atomic() (s) | vs {first} | "
        "enqueue → start p50 / p99 (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in out.items():
        lines.append(
            f"| `{name}` | {row['runjobs_c2']:,.0f} | {_ratio(row['runjobs_c2'], base['runjobs_c2'])} | "
            f"{row['enqueue_single_us']:,.0f}; {row['enqueue_single_round_trips']:.1f} | "
            f"{_ratio(row['enqueue_single_us'], base['enqueue_single_us'])} | {row['enqueue_tx_s']:.2f} | "
            f"{_ratio(row['enqueue_tx_s'], base['enqueue_tx_s'])} | "
            f"{row['latency_p50_ms']:.1f} / {row['latency_p99_ms']:.1f} |"
        )
    return "\n".join(lines)
