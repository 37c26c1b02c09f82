"""The peers (Celery, Dramatiq, django-tasks-db), their virtualenv, and the drain every runner of the
I/O and peer runs goes through; plus ``benchmarks/run --only peers``: the no-op drain side by side.

The peers never enter the project's ``.venv``: they live in ``var/bench-peers``, built on first use
with the pinned versions below (and rebuilt when the pins change). If it cannot be built, every peer
run is skipped with a one-line note.

A drain (:func:`drain`): the jobs are enqueued first, then the runner's process(es) start and run
until every job has stamped the stamp file (``benchmarks/stamp.py``); the rate is N / (first job's
start -> last job's end), read from the stamps, and a run counts only with N stamps of N distinct
jobs. Meanwhile the VmRSS of every process of the runner (its processes and all their descendants)
is summed every 0.1 s.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import Redis

from . import stamp
from .infra import REPO, BenchError, manage, stop, tree_rss_mib

VENV = REPO / "var" / "bench-peers"
PINS = (
    "celery[redis]>=5.7,<5.8",
    "gevent>=26,<27",
    "dramatiq[redis]>=2.2,<2.3",
    "django-tasks-db>=0.13,<0.14",
    "django-tasks>=0.12,<0.13",
    "django>=5.2,<5.3",
    "psycopg[binary]>=3.2,<4",
)
DISTRIBUTIONS = ("celery", "kombu", "gevent", "dramatiq", "django-tasks-db", "django-tasks")
#: The Redis database of each peer's broker on the private Redis (django_jobs uses 0).
BROKER_DB = {"celery_prefork": 1, "celery_gevent": 2, "dramatiq": 3}
QUEUE = "default"
SAMPLE_EVERY = 0.1


@dataclass(frozen=True)
class PeerSide:
    """The peers' interpreter, or why there is none; and the peers' versions."""

    python: Path | None
    why_not: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def none(cls, why: str) -> PeerSide:
        return cls(None, why)

    @classmethod
    def build(cls, bench: Any, log: Callable[[str], None]) -> PeerSide:
        """The virtualenv (built if missing or pinned differently), its versions, and
        django-tasks-db's tables in the benchmark's database."""
        try:
            python = _virtualenv(log)
            env = {**bench.runner.env, "DJANGO_SETTINGS_MODULE": "benchmarks.peerside.settings"}
            query = (
                "import importlib.metadata as m, json; "
                f"print(json.dumps({{d: m.version(d) for d in {DISTRIBUTIONS!r}}}))"
            )
            out = subprocess.run(
                [python, "-c", query], capture_output=True, text=True, check=True, timeout=60, cwd=REPO
            )
            subprocess.run(
                [python, "-m", "django", "migrate", "-v", "0"],
                env=env, cwd=REPO, capture_output=True, check=True, timeout=120,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"the peers' virtualenv could not be built or used ({type(exc).__name__}: {exc})"
            log(f"  Peers skipped: {why}")
            return cls.none(why)
        return cls(python, versions=json.loads(out.stdout))

    def describe(self) -> str:
        return ", ".join(f"{d} {v}" for d, v in self.versions.items()) or f"peers skipped: {self.why_not}"


def _virtualenv(log: Callable[[str], None]) -> Path:
    python, pins = VENV / "bin" / "python", VENV / "pins.txt"
    if python.exists() and pins.exists() and pins.read_text() == "\n".join(PINS):
        return python
    log(f"  Building the peers' virtualenv in {VENV.relative_to(REPO)} ...")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", VENV], check=True, capture_output=True, timeout=120)
    subprocess.run(
        [python, "-m", "pip", "install", "-q", *PINS], check=True, capture_output=True, timeout=900
    )
    pins.write_text("\n".join(PINS))
    return python


@dataclass(frozen=True)
class Contender:
    """A runner of the drain: its command, started ``processes`` times, how it gets its jobs."""

    key: str
    label: str
    argv: tuple[str, ...]
    slots: int  # jobs it runs at once
    enqueue: Callable[[str, int, Path], None]  # (job: noop / wait / wait_async, n, stamp file)
    processes: int = 1
    env: dict[str, str] = field(default_factory=dict)


def runjobs(bench: Any, key: str, label: str, *extra: str, slots: int = 2) -> Contender:
    """``runjobs --concurrency 2`` (long-lived), fed in this process."""
    from .benchapp import jobs

    targets = {"noop": jobs.stamp_noop, "wait": jobs.wait, "wait_async": jobs.wait_async}

    def enqueue(job: str, n: int, path: Path) -> None:
        bench._flush()
        bench._clean_db()
        for start in range(0, n, 5000):
            targets[job].enqueue_many([(i, str(path)) for i in range(start, min(start + 5000, n))])

    return Contender(
        key, label, tuple(manage("runjobs", "--concurrency", "2", *extra, QUEUE)), slots, enqueue
    )


def peer(
    bench: Any, side: PeerSide, key: str, label: str, argv: tuple[str, ...], slots: int, **kw: Any
) -> Contender:
    """A peer's command (``argv`` after its interpreter), fed by ``python -m benchmarks.peerside``."""
    assert side.python is not None
    python = str(side.python)
    db = BROKER_DB.get(key)
    # Only the Django Tasks peer is a Django project (Celery would apply its Django fix-up otherwise).
    env = {"DJANGO_SETTINGS_MODULE": "benchmarks.peerside.settings" if key == "db_worker" else ""}
    if db is not None:
        env["BENCH_PEER_BROKER"] = f"redis://127.0.0.1:{bench.redis.port}/{db}"
    kind = {"db_worker": "tasks", "dramatiq": "dramatiq"}.get(key, "celery")

    def enqueue(job: str, n: int, path: Path) -> None:
        if db is not None:
            Redis(host="127.0.0.1", port=bench.redis.port, db=db).flushdb()
        subprocess.run(
            [python, "-m", "benchmarks.peerside", kind, job.removesuffix("_async"), str(n), str(path)],
            env={**bench.runner.env, **env}, cwd=REPO, check=True, capture_output=True, timeout=300,
        )  # fmt: skip

    return Contender(key, label, (python, *argv), slots, enqueue, env=env, **kw)


def celery(bench: Any, side: PeerSide, pool: str, concurrency: int) -> Contender:
    argv = (
        "-m", "celery", "-A", "benchmarks.peerside.celery_app", "worker", "-P", pool, "-c", str(concurrency),
        "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
    )  # fmt: skip
    label = f"Celery `-P {pool} -c {concurrency}`"
    return peer(bench, side, f"celery_{pool}", label, argv, concurrency)


def dramatiq(bench: Any, side: PeerSide, threads: int) -> Contender:
    argv = ("-m", "dramatiq", "benchmarks.peerside.dramatiq_app", "-p", "2", "-t", str(threads))
    return peer(bench, side, "dramatiq", f"Dramatiq `-p 2 -t {threads}`", argv, 2 * threads)


def db_worker(bench: Any, side: PeerSide) -> Contender:
    argv = ("-m", "django", "db_worker", "-v", "0", "--no-startup-delay")
    label = "django-tasks-db: `db_worker`, 2 processes"
    return peer(bench, side, "db_worker", label, argv, 2, processes=2)


def drain(bench: Any, contender: Contender, job: str, n: int) -> dict[str, float]:
    """Run ``n`` pre-enqueued ``job``s through ``contender``; its rate and the RSS of its processes."""
    path = bench.workdir / f"stamps-{contender.key}-{job}.log"
    path.unlink(missing_ok=True)
    contender.enqueue(job, n, path)
    timeout = 120 + n * stamp.WAIT_SECONDS
    started = [
        bench.runner.start(contender.argv, contender.env, contender.key)[0]
        for _ in range(contender.processes)
    ]
    samples: list[tuple[int, int, float]] = []  # (jobs done, processes, MiB)
    deadline = time.monotonic() + timeout
    try:
        while True:
            done = stamp.count(path)
            samples.append((done, *tree_rss_mib([p.pid for p in started])))
            if done >= n:
                break
            if exited := [p.returncode for p in started if p.poll() is not None]:
                raise BenchError(f"{contender.key} exited with {exited[0]} after {done} of {n} jobs")
            if time.monotonic() > deadline:
                raise BenchError(f"{contender.key}: {done} of {n} jobs ran within {timeout:.0f} s")
            time.sleep(SAMPLE_EVERY)
    finally:
        for process in started:
            stop(process)
    found = stamp.read(path)
    if found.lines != n or found.distinct != n:
        raise BenchError(f"{contender.key}: {found.lines} runs of {found.distinct} distinct jobs, for {n}")
    running = [mib for done, _, mib in samples if 0 < done < n] or [mib for _, _, mib in samples]
    return {
        "jobs": n,
        "jobs_s": n / found.span,
        "peak_rss_mib": max(mib for _, _, mib in samples),
        "mean_rss_mib": statistics.mean(running),
        "processes": max(count for _, count, _ in samples),
    }


def run_all(
    bench: Any, contenders: list[Contender], job: Callable[[Contender], str], size: Callable[[Contender], int]
) -> dict[str, Any]:
    """One drain per contender; a failure is reported and the others still run."""
    runs: dict[str, dict[str, float]] = {}
    for contender in contenders:
        try:
            runs[contender.key] = drain(bench, contender, job(contender), size(contender))
        except (BenchError, subprocess.SubprocessError) as exc:
            reason = str(exc).splitlines()[0]
            bench.log(f"  {contender.key}: FAILED: {reason}")
            bench.failures.append(f"{contender.key}: {reason}")
            continue
        bench.log(f"  {contender.key}: {runs[contender.key]}")
    return runs


# --- the peers section: the no-op drain ------------------------------------------------------------


def measure(bench: Any, side: PeerSide) -> dict[str, Any]:
    """N no-ops drained by runjobs c=2 and by each peer at two processes; medians of ``repeat``."""
    contenders = [runjobs(bench, "runjobs_c2", "`runjobs --concurrency 2`")]
    if side.python is not None:
        contenders += [celery(bench, side, "prefork", 2), dramatiq(bench, side, 1), db_worker(bench, side)]
    n = bench.sizes.jobs
    reps = [run_all(bench, contenders, lambda c: "noop", lambda c: n) for _ in range(bench.sizes.repeat)]
    rates = {c.key: [r[c.key]["jobs_s"] for r in reps if c.key in r] for c in contenders}
    return {
        "jobs_s": {key: statistics.median(v) for key, v in rates.items() if v},
        "labels": {c.key: c.label for c in contenders},
        "peers": side.describe(),
        "runs": reps,
    }


def render(found: dict[str, Any], n: int) -> list[tuple[str, str]]:
    rates, labels = found["jobs_s"], found["labels"]
    rows = [
        (f"No-op drain of {n:,}, {labels[k]} (first start → last end)", f"{v:,.0f} jobs/s")
        for k, v in rates.items()
    ]
    base = rates.get("runjobs_c2")
    for key, rate in rates.items():
        if key != "runjobs_c2" and base:
            rows.append((f"Ratio runjobs c=2 / {labels[key]}, no-op drain", f"{base / rate:.1f}x"))
    return rows
