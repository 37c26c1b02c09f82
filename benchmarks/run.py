"""``benchmarks/run``: django_jobs' worker and enqueue against django-rq and RQ, on a private Redis.

Starts its own ``redis-server`` on a free loopback port and (by default) a SQLite database in a
temporary directory, runs every benchmark in this process tree, prints a Markdown table, and
cleans up. See ``benchmarks/README.md`` for what each number means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .infra import REPO, BenchError, PrivateRedis, Runner, ensure_postgres_database, free_port
from .setups import SETUPS

if TYPE_CHECKING:
    from .scenarios import Sizes

SECTIONS = (
    "throughput", "commands", "enqueue", "latency", "memory", "cpu",
    "browser", "verify", "setups", "io", "peers",
)  # fmt: skip
#: Left out of --quick unless --only names them: they build and run the peers' virtualenv.
NOT_QUICK = ("peers",)
QUICK = {
    "jobs": 200,
    "repeat": 1,
    "enqueue_tx": 1000,
    "enqueue_single": 300,
    "probes": 50,
    "due_probes": 10,
    "memory_jobs": 5000,
    "browse_jobs": 2000,
    "cpu_jobs": 1000,
    "io_per_slot": 20,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run (about a minute)")
    parser.add_argument("--repeat", type=int, help="repetitions; medians are reported (default 3, quick 1)")
    parser.add_argument("--jobs", type=int, help="jobs per throughput run (default 2000, quick 200)")
    parser.add_argument("--enqueue-tx", type=int, help="jobs in the one transaction (default 10000)")
    parser.add_argument("--enqueue-single", type=int, help="one-by-one enqueues (default 2000)")
    parser.add_argument("--probes", type=int, help="latency probes, one every 20 ms (default 200)")
    parser.add_argument("--due-probes", type=int, help="enqueue_in(0.5) probes (default 20)")
    parser.add_argument("--memory-jobs", type=int, help="jobs in the memory run (default 100000)")
    parser.add_argument(
        "--browse-jobs", type=int, help="jobs in the browsed queue and rows in its history (default 100000)"
    )
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL (database django_jobs_bench)")
    parser.add_argument("--port", type=int, default=6385, help="preferred port of the private Redis")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        help="JOBS['LEASE_SECONDS'] for runjobs (default: django_jobs' default)",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated sections ({', '.join(SECTIONS)}); default all (--quick: all but "
        f"{', '.join(NOT_QUICK)}, and the I/O run without its peers)",
    )
    parser.add_argument(
        "--cpu-jobs", type=int, help="jobs in the CPU-per-job drain (default 20000, quick 1000)"
    )
    parser.add_argument(
        "--io-per-slot",
        type=int,
        help="I/O-bound run: jobs per job a runner runs at once (default 100, quick 20)",
    )
    parser.add_argument(
        "--workers",
        help="comma-separated throughput runs (default all: runjobs_c1, runjobs_c2, rqworker, rqworker_pool, "
        "simpleworker, runjobs_c2_write, runjobs_c2_result, runjobs_c2_task)",
    )
    parser.add_argument(
        "--setups",
        default="fast,two-servers,replicated,ledger",
        help="comma-separated setups of the setups section (fast, two-servers, replicated, ledger, "
        "no-history): throughput, enqueue cost and latency in each, side by side with fast on one server",
    )
    parser.add_argument(
        "--fairness",
        help="comma-separated modes (plain, deferred, keyed): instead of the sections, drain one tenant's "
        "backlog queued ahead of nine others' in each mode, side by side",
    )
    parser.add_argument("--fair-big", type=int, default=10_000, help="the big tenant's jobs (default 10000)")
    parser.add_argument("--fair-small", type=int, default=100, help="each small tenant's jobs (default 100)")
    parser.add_argument("--fair-job-ms", type=float, default=0.0, help="milliseconds each job sleeps")
    parser.add_argument("--fair-cap", type=float, default=900.0, help="seconds a mode may run (default 900)")
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="another checkout (with its .venv) to run side by side, in alternating rounds",
    )
    parser.add_argument("--rounds", type=int, default=4, help="rounds with --against (default 4)")
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args(argv)
    args.peers = not args.quick or args.only is not None  # the peers' runs, in io and peers
    if args.only is None:
        args.only = ",".join(s for s in SECTIONS if not (args.quick and s in NOT_QUICK))
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    unknown = set(args.setups.split(",")) - set(SETUPS)
    if unknown:
        parser.error(f"unknown setup(s): {', '.join(sorted(unknown))}")
    return args


def sizes_from(args: argparse.Namespace) -> Sizes:
    """The sizes asked for: defaults, or --quick's, overridden by explicit options."""
    from .scenarios import Sizes

    defaults = Sizes()
    chosen: dict[str, int] = {}
    names = (
        "jobs",
        "repeat",
        "enqueue_tx",
        "enqueue_single",
        "probes",
        "due_probes",
        "memory_jobs",
        "browse_jobs",
        "cpu_jobs",
        "io_per_slot",
    )
    for name in names:
        value = getattr(args, name)
        if value is None:
            value = QUICK[name] if args.quick else getattr(defaults, name)
        if value < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
        chosen[name] = value
    chosen["memory_first"] = min(defaults.memory_first, chosen["memory_jobs"] // 2)
    return Sizes(**chosen)


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def revision() -> str:
    """The commit measured, with ``-dirty`` if the working tree has changes."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the table -----------------------------------------------------------------------------------


def _x(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "n/a"


def render(results: dict[str, Any], sizes: Sizes, env: dict[str, str]) -> str:
    """The results as Markdown: a header line, then one table of measure | result."""
    from .browser import render as render_browser
    from .cpu import render as render_cpu
    from .iobound import render as render_io
    from .peers import render as render_peers
    from .scenarios import WORKERS_BY_KEY
    from .setups import render as render_setups
    from .verify import render as render_verify

    rows: list[tuple[str, str]] = []

    def add(measure: str, result: str) -> None:
        rows.append((measure, result))

    n = sizes.jobs
    tp, wall = results.get("throughput", {}), results.get("throughput_wall", {})
    for key, rate in tp.items():
        worker = WORKERS_BY_KEY[key]
        add(
            f"Throughput, {worker.label}" + (f" on {env['db']}" if worker.write else ""),
            f"{rate:,.0f} jobs/s (wall time - empty run: {wall[key]:,.0f})"
            if key in wall
            else f"{rate:,.0f} jobs/s (wall time - empty run: n/a)",
        )
    for other, name in (
        ("rqworker", "rqworker"),
        ("rqworker_pool", "rqworker-pool (2 workers)"),
        ("simpleworker", "SimpleWorker"),
        ("runjobs_c1", "runjobs c=1"),
    ):
        if "runjobs_c2" in tp and other in tp:
            add(f"Ratio runjobs c=2 / {name}", _x(tp["runjobs_c2"], tp[other]))
    if "runjobs_c2" in tp and "runjobs_c2_result" in tp:
        ratio = _x(tp["runjobs_c2_result"], tp["runjobs_c2"])
        add("Ratio runjobs c=2 keeping results / not keeping them", ratio)
    if "runjobs_c2" in tp and "runjobs_c2_task" in tp:
        add("Ratio runjobs c=2 Django `@task` / `@job`", _x(tp["runjobs_c2_task"], tp["runjobs_c2"]))
    cm = results.get("commands", {})
    for key, name in (
        ("runjobs_c1", "runjobs c=1"),
        ("runjobs_c2", "runjobs c=2"),
        ("simpleworker", "SimpleWorker"),
    ):
        if key in cm:
            c = cm[key]
            add(
                f"Redis per job, {name}: commands (sent + run in scripts) / round trips",
                f"{c['commands']:.1f} ({c['sent']:.1f} + {c['scripted']:.1f}) / {c['round_trips']:.2f}",
            )
    for key, name in (("enqueue_many_django_jobs", "django_jobs"), ("enqueue_many_rq", "RQ")):
        if key in cm:
            c = cm[key]
            add(
                f"Redis per job, {name} `enqueue_many` of {n:,}: commands / round trips",
                f"{c['commands']:.1f} / {c['round_trips']:.3f}",
            )
    if "enqueue_tx" in results:
        et, m = results["enqueue_tx"], sizes.enqueue_tx
        add(
            f"Enqueue {m:,} in one `atomic()`, django_jobs (outbox, pushed at commit)",
            f"{et['django_jobs']:.2f} s",
        )
        add(f"Enqueue {m:,} in one `atomic()`, django-rq `on_db_commit`", f"{et['django_rq']:.2f} s")
        add("Ratio django-rq / django_jobs, enqueue in a transaction", _x(et["django_rq"], et["django_jobs"]))
    if "enqueue_single" in results:
        es, rr, m = results["enqueue_single"], results["enqueue_single_redis"], sizes.enqueue_single
        for lib, name in (
            ("django_jobs", "django_jobs `job.enqueue()`"),
            ("rq", "bare `rq.Queue.enqueue()`"),
        ):
            add(
                f"Enqueue one by one ({m:,}), no transaction, {name}",
                f"{es[lib] / m * 1e6:,.0f} µs/job; {rr[lib]['commands']:.1f} commands, "
                f"{rr[lib]['round_trips']:.1f} round trips",
            )
        add("Ratio django_jobs / rq, enqueue one by one (target ≤ 1.2x)", _x(es["django_jobs"], es["rq"]))
    if "latency" in results:
        lt = results["latency"]
        add(
            f"Latency enqueue → start, idle runjobs c=2, {sizes.probes} probes: p50 / p99 / max",
            f"{lt['p50_ms']:.1f} / {lt['p99_ms']:.1f} / {lt['max_ms']:.1f} ms",
        )
        add(
            f"Due → start, `enqueue_in(0.5)`, {lt['due_count']} probes: p50 / max; started within 1 s",
            f"{lt['due_p50_ms']:.0f} / {lt['due_max_ms']:.0f} ms; "
            f"{lt['due_within_1s']}/{lt['due_count']} (early: {lt['due_early']})",
        )
    if "memory" in results:
        mem = results["memory"]

        def mib(values: list[float]) -> str:
            return " / ".join(f"{x:.1f}" for x in values) + " MiB"

        add("RSS of each work process, idle after start", mib(mem["idle_mib"]))
        add(f"RSS of each work process after {sizes.memory_first:,} jobs", mib(mem["early_mib"]))
        add(f"RSS of each work process after {sizes.memory_jobs:,} jobs", mib(mem["late_mib"]))
        add(
            f"RSS ratio, after {sizes.memory_jobs:,} / after {sizes.memory_first:,} jobs",
            (f"{mem['ratio']:.2f}" if mem["ratio"] is not None else "n/a")
            + (f" ({mem['replaced']} work process(es) replaced during the run)" if mem["replaced"] else ""),
        )
        add("Rate during the memory run (enqueueing alongside)", f"{mem['sustained_jobs_s']:,.0f} jobs/s")
        cpu = mem["cpu_us_per_job"]
        add(
            "CPU per job in the memory run: supervisor / work processes / redis-server",
            f"{cpu[0]:.0f} / {cpu[1]:.0f} / {cpu[2]:.0f} µs" if cpu else "n/a (work processes were replaced)",
        )
    if "cpu" in results:
        rows += render_cpu(results["cpu"], sizes.cpu_jobs)
    if "io" in results:
        rows += render_io(results["io"])
    if "peers" in results:
        rows += render_peers(results["peers"], n)
    if "io" in results or "peers" in results:
        add("Peers (I/O-bound and no-op runs)", (results.get("peers") or results["io"])["peers"])
    if "browser" in results:
        for measure, result in render_browser(results["browser"]):
            add(measure, result)
    if "verify" in results:
        for measure, result in render_verify(results["verify"]):
            add(measure, result)
    if "health" in results:
        h = results["health"]
        add(
            "runjobs logs: work processes killed by the lease fence / attempts lost (should be 0 / 0)",
            f"{h['fence_kills']} / {h['lost']}"
            + (f"; {h['crash_loops']} crash-loop stop(s)" if h["crash_loops"] else ""),
        )
    for reason in results.get("failed", []):
        add("FAILED", reason.replace("|", "/"))
    setups = "" if "setups" not in results else "\n\n" + render_setups(results["setups"], sizes)
    header = (
        f"django_jobs {env['revision']} on {env['cpu']}, {env['cpus']} CPUs; "
        f"Python {env['python']}, Django {env['django']}, rq {env['rq']}, django-rq {env['django_rq']}, "
        f"Redis {env['redis']}, redis-py {env['redis_py']}, {env['db']}. "
        f"N = {n:,} jobs; throughput and enqueue times are medians of {sizes.repeat} run(s)."
    )
    from .scenarios import Sizes

    if n < Sizes().jobs:
        header += " Smaller than the default sizes: a smoke run, whose ratios are dominated by start-up."
    width = max((len(r[0]) for r in rows), default=7)
    lines = [header, "", f"| {'measure':<{width}} | result |", f"|{'-' * (width + 2)}|--------|"]
    lines += [f"| {a:<{width}} | {b} |" for a, b in rows]
    return "\n".join(lines) + setups


# --- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.against:
        from . import against

        given = sys.argv[1:] if argv is None else argv
        return against.main(args.against, args.rounds, against.without(given, ["--against", "--rounds"]))
    sections = [s for s in SECTIONS if s in args.only.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="django-jobs-bench-"))
    redis = PrivateRedis(workdir, free_port(args.port))
    started = time.monotonic()
    try:
        redis.start()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "BENCH_REDIS_URL": redis.url,
            "BENCH_DB": "postgres" if args.postgres else "sqlite",
            "BENCH_SQLITE_PATH": str(workdir / "bench.sqlite3"),
        }
        if args.lease_seconds:
            env["BENCH_LEASE_SECONDS"] = str(args.lease_seconds)
        if args.fairness:
            env["BENCH_FAIRNESS"] = "1"
        if args.postgres:
            ensure_postgres_database(os.environ.get("BENCH_PG_NAME", "django_jobs_bench"))
        os.environ.update(env)
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection
        from redis.utils import HIREDIS_AVAILABLE

        call_command("migrate", verbosity=0)
        from . import cpu, iobound, peers
        from .browser import measure as browse_measure
        from .scenarios import Bench
        from .setups import compare
        from .verify import measure as verify_measure

        sizes = sizes_from(args)
        db = (
            "SQLite (IMMEDIATE)"
            if connection.vendor == "sqlite"
            else f"PostgreSQL {getattr(connection, 'pg_version', 0) // 10000}"
        )
        info = {
            "cpu": cpu_model(),
            "cpus": str(os.cpu_count()),
            "python": platform.python_version(),
            "django": version("django"),
            "rq": version("rq"),
            "django_rq": version("django-rq"),
            "redis": redis.version(),
            # redis-py parses replies in C when hiredis is installed: it moves every figure
            "redis_py": f"{version('redis')} ({'hiredis' if HIREDIS_AVAILABLE else 'pure-Python'} parser)",
            "db": db,
            "revision": revision(),
        }
        bench = Bench(sizes, redis, Runner(env, workdir), workdir, log)
        log(f"Private Redis on port {redis.port}; work files in {workdir}")
        from .scenarios import WORKERS

        workers = args.workers.split(",") if args.workers else [w.key for w in WORKERS]
        unknown = set(workers) - {w.key for w in WORKERS}
        if unknown:
            raise SystemExit(f"unknown worker(s): {', '.join(sorted(unknown))}")

        def enqueue() -> None:
            bench.enqueue_transaction()
            bench.enqueue_single()

        def peer_side() -> peers.PeerSide:
            """The peers' virtualenv, built on first use (or why there is none)."""
            if "peers" not in cache:
                cache["peers"] = (
                    peers.PeerSide.build(bench, log)
                    if args.peers
                    else peers.PeerSide.none("left out of --quick (name the section in --only to run them)")
                )
            return cache["peers"]

        cache: dict[str, peers.PeerSide] = {}

        def setups() -> None:
            bench.results["setups"] = compare(bench, env, args.setups.split(","), log)

        steps: dict[str, Callable[[], None]] = {
            "throughput": lambda: bench.throughput(workers),
            "commands": lambda: bench.commands(["runjobs_c1", "runjobs_c2", "simpleworker"]),
            "enqueue": enqueue,
            "latency": bench.latency,
            "memory": bench.memory,
            "cpu": lambda: bench.results.update(cpu=cpu.measure(bench)),
            "io": lambda: bench.results.update(io=iobound.measure(bench, peer_side(), sizes.io_per_slot)),
            "peers": lambda: bench.results.update(peers=peers.measure(bench, peer_side())),
            "browser": lambda: bench.results.update(browser=browse_measure(bench, sizes.browse_jobs)),
            "verify": lambda: bench.results.update(verify=verify_measure(bench)),
            "setups": setups,
        }
        failed = bench.failures  # single runs that failed land here too
        if args.fairness:
            return by_mode(bench, args)
        for section in sections:
            log(section.capitalize())
            try:
                steps[section]()
            except BenchError as exc:  # report it, and still measure the other sections
                log(f"  FAILED: {exc}")
                failed.append(f"{section}: {str(exc).splitlines()[0]}")
        bench.health()
        bench.results["failed"] = failed
        if args.json:
            args.json.write_text(json.dumps({"env": info, "sizes": vars(sizes), **bench.results}, indent=1))
        print(render(bench.results, sizes, info))
        log(f"Done in {time.monotonic() - started:.0f} s.")
        return 1 if failed else 0
    finally:
        redis.stop()
        if args.keep:
            log(f"Kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def by_mode(bench: Any, args: argparse.Namespace) -> int:
    """``--fairness``: the fairness drain in each mode, one table."""
    from . import fairness

    modes = args.fairness.split(",")
    unknown = set(modes) - set(fairness.MODES)
    if unknown:
        raise SystemExit(f"unknown mode(s): {', '.join(sorted(unknown))}")
    shape = fairness.Shape(args.fair_big, args.fair_small, args.fair_job_ms, args.fair_cap)
    out = fairness.compare(bench, modes, shape, log)
    if args.json:
        args.json.write_text(json.dumps({"shape": vars(shape), **out}, indent=1))
    print(fairness.render(out, shape))
    return 1 if bench.failures else 0


if __name__ == "__main__":
    sys.exit(main())
