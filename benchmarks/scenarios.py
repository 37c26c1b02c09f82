"""The measurements. Each stores plain numbers in ``Bench.results``; ``benchmarks.run`` renders them.

Django must be set up (``benchmarks.settings``) before this module is imported.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django_rq
from django.db import transaction
from redis import Redis
from rq import Queue
from rq.serializers import JSONSerializer

from django_jobs import get_job
from django_jobs.client.enqueue import Options, enqueue_calls
from django_jobs.models import DeadLetter, IdempotencyKey, OutboxEntry
from django_jobs.store import LEASES, job_key, queue_key

from .benchapp.jobs import noop, noop_result, probe, rq_noop, write_once
from .benchapp.models import Write
from .infra import (
    JSON_SERIALIZER,
    BenchError,
    PrivateRedis,
    RedisCount,
    Runner,
    children,
    count_monitor,
    cpu_seconds,
    manage,
    monitor,
    read_counters,
    redis_cpu_seconds,
    reset_counters,
    rss_mib,
    stop,
    wait_until,
)

QUEUE = "default"


@dataclass(frozen=True)
class Sizes:
    """How much work each benchmark does."""

    jobs: int = 2000  # throughput and Redis commands
    repeat: int = 3
    enqueue_tx: int = 10_000  # jobs in the one transaction
    enqueue_single: int = 2000  # one-by-one enqueues
    probes: int = 200  # latency probes, one every PROBE_INTERVAL
    due_probes: int = 20  # enqueue_in(DUE_DELAY) probes
    memory_jobs: int = 100_000
    memory_first: int = 1000
    browse_jobs: int = 100_000  # jobs in the browsed queue, and rows in its history
    cpu_jobs: int = 20_000  # the CPU-per-job drain: large, so start-up's variance shrinks per job
    io_per_slot: int = 100  # I/O-bound run: jobs per job a runner runs at once


PROBE_INTERVAL = 0.02
DUE_DELAY = 0.5


Process = subprocess.Popen[bytes]


def alive(process: Process) -> bool:
    """True while a long-lived runjobs runs; raises if it exited, so no wait outlives it."""
    if process.poll() is not None:
        raise BenchError(f"runjobs exited with {process.returncode} while jobs were waiting")
    return True


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


@dataclass(frozen=True)
class Worker:
    """One worker command of the throughput comparison."""

    key: str
    label: str
    argv: tuple[str, ...]
    rq: bool  # runs RQ jobs (rq_noop) rather than django_jobs jobs
    job: str = "noop"  # which django_jobs job: "noop", "write" (bench.write_once), "result" (noop_result)

    @property
    def write(self) -> bool:
        return self.job == "write"


def _rqworker(*extra: str) -> tuple[str, ...]:
    return (*extra, "--burst", "-v", "0", "--serializer", JSON_SERIALIZER, QUEUE)


def _runjobs(concurrency: int) -> tuple[str, ...]:
    return tuple(manage("runjobs", "--burst", "--concurrency", str(concurrency), QUEUE))


WORKERS = [
    Worker("runjobs_c1", "`runjobs --concurrency 1`", _runjobs(1), False),
    Worker("runjobs_c2", "`runjobs --concurrency 2`", _runjobs(2), False),
    Worker("rqworker", "`rqworker` (fork per job)", tuple(manage(*_rqworker("rqworker"))), True),
    Worker(
        "rqworker_pool",
        "`rqworker-pool --num-workers 2`",
        tuple(manage(*_rqworker("rqworker-pool", "--num-workers", "2"))),
        True,
    ),
    Worker(
        "simpleworker",
        "`rqworker --worker-class rq.worker.SimpleWorker`",
        tuple(manage(*_rqworker("rqworker", "--worker-class", "rq.worker.SimpleWorker"))),
        True,
    ),
    Worker(
        "runjobs_c2_write", "`runjobs --concurrency 2`, `bench.write_once`", _runjobs(2), False, job="write"
    ),
    Worker(
        "runjobs_c2_task",
        "`runjobs --concurrency 2`, a Django `@task` no-op (through django_jobs.tasks.JobsBackend)",
        _runjobs(2),
        False,
        job="task",
    ),
    Worker(
        "runjobs_c2_result",
        "`runjobs --concurrency 2`, `bench.noop_result` (keeps its result)",
        _runjobs(2),
        False,
        job="result",
    ),
]
WORKERS_BY_KEY = {w.key: w for w in WORKERS}


def _enqueue_task(n: int) -> str:
    """One ``@task`` enqueue through Django's own API (one push per task: the API has no bulk enqueue)."""
    from .benchapp.tasks import noop_task

    return str(noop_task.enqueue(n).id)


@dataclass
class Bench:
    """The benchmarks, sharing one private Redis, one database and one subprocess runner."""

    sizes: Sizes
    redis: PrivateRedis
    runner: Runner
    workdir: Path
    log: Callable[[str], None]
    results: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: Each queue the django_jobs no-ops are spread over, with its Redis (``setups``: two servers).
    servers: dict[str, PrivateRedis] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.servers = self.servers or {QUEUE: self.redis}

    @property
    def client(self) -> Redis:
        return self.redis.client

    @property
    def queues(self) -> list[str]:
        return list(self.servers)

    def _clients(self) -> list[Redis]:
        """Each Redis the queues live on, once."""
        return list({id(s): s.client for s in self.servers.values()}.values())

    # --- helpers ---------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Every Redis emptied, and the ledger rows of the jobs it held with it (a sweep would push
        them again; ``verify_crash_safe`` refuses a database whose tables are that big)."""
        for client in self._clients():
            client.flushdb()
        OutboxEntry.objects.all().delete()

    def _noops(self) -> list[Any]:
        """What enqueues ``bench.noop``: to each queue in turn (the job itself with one queue)."""
        return [noop] if len(self.servers) == 1 else [noop.options(queue=q) for q in self.queues]

    def _argv(self, worker: Worker) -> list[str]:
        """The worker's command; a runjobs serves every queue."""
        return [*worker.argv, *([] if worker.rq else self.queues[1:])]

    @functools.cached_property
    def _rq_queue(self) -> Queue:
        """A bare RQ queue with its own connection, as a plain RQ user would have."""
        return Queue(QUEUE, connection=Redis.from_url(self.redis.url), serializer=JSONSerializer)

    def _enqueue(self, worker: Worker, n: int, tag: str, check: bool = True) -> list[str]:
        """Put ``n`` jobs for ``worker`` in the queue (untimed, in batches); returns their ids."""
        ids: list[str] = []
        for start in range(0, n, 5000):
            batch = range(start, min(start + 5000, n))
            if worker.rq:
                jobs = self._rq_queue.enqueue_many([Queue.prepare_data(rq_noop, (i,)) for i in batch])
                ids += [j.id for j in jobs]
            elif worker.write:
                ids += [h.id for h in write_once.enqueue_many([(f"{tag}:{i}", i) for i in batch])]
            elif worker.job == "task":
                ids += [_enqueue_task(i) for i in batch]
            elif worker.job == "result":
                ids += [h.id for h in noop_result.enqueue_many([(i,) for i in batch])]
            else:
                for k, queue in enumerate(self.queues):  # in turn, as the enqueue measures do
                    calls = [((i,), {}) for i in batch if i % len(self.queues) == k]
                    ids += [h.id for h in enqueue_calls(noop, calls, options=Options(queue=queue))]
        if check:
            self._expect_queued(n)
        return ids

    def _fields(self, ids: Sequence[str], *names: str) -> list[list[bytes | None]]:
        """``names`` of each job hash, from whichever Redis holds it."""
        found: list[list[bytes | None]] = [[None] * len(names) for _ in ids]
        for client in self._clients():
            with client.pipeline(transaction=False) as pipe:
                for job_id in ids:
                    pipe.hmget(job_key(job_id), list(names))
                for row, values in zip(found, pipe.execute(), strict=True):
                    row[:] = [a if a is not None else b for a, b in zip(row, values, strict=True)]
        return found

    def _queued(self) -> int:
        return sum(self.servers[q].client.llen(queue_key(q)) for q in self.queues)

    def _verify(self, worker: Worker, ids: Sequence[str]) -> None:
        """Every job ran to success exactly as it should have."""
        if self._queued():
            raise BenchError(f"{worker.key}: jobs left in the queue")
        if worker.rq:
            finished = self.client.zcard(f"rq:finished:{QUEUE}")
            failed = self.client.zcard(f"rq:failed:{QUEUE}")
            if finished != len(ids) or failed:
                raise BenchError(f"{worker.key}: {finished} finished, {failed} failed of {len(ids)}")
            return
        done = sum(status == b"finished" for (status,) in self._fields(ids, "status"))
        if done != len(ids) or DeadLetter.objects.exists():
            raise BenchError(f"{worker.key}: {done} of {len(ids)} jobs finished")
        if worker.write and Write.objects.count() != len(ids):
            raise BenchError(f"{worker.key}: {Write.objects.count()} writes for {len(ids)} jobs")
        if worker.job in ("result", "task") and any(get_job(i).status != "finished" for i in ids[:50]):
            raise BenchError(f"{worker.key}: a result is missing")

    def _clean_db(self) -> None:
        Write.objects.all().delete()
        IdempotencyKey.objects.all().delete()
        OutboxEntry.objects.all().delete()

    def _timeout(self, n: int) -> float:
        return 120 + n / 20  # far above the slowest worker's ~45 jobs/s, but bounded

    def _start_runjobs(self, concurrency: int) -> Process:
        """A long-lived ``runjobs``; returns once its work processes are registered and idle."""
        self._flush()
        process, _ = self.runner.start(manage("runjobs", "--concurrency", str(concurrency)))
        wait_until(lambda: self.client.scard("rq:workers") >= concurrency, 60, "runjobs to start")
        wait_until(lambda: len(children(process.pid)) >= concurrency, 10, "work processes")
        time.sleep(0.5)
        if process.poll() is not None:
            raise BenchError(f"runjobs exited with {process.returncode}")
        return process

    # --- 2. processing throughput ----------------------------------------------------------------

    def _span(self, ids: Sequence[str]) -> float:
        """Seconds from the first job's start to the last job's end, as the workers recorded them
        in the job hashes (``started_at`` / ``ended_at``, which RQ and django_jobs both write)."""
        stamps = self._fields(ids, "started_at", "ended_at")
        starts = [dt.datetime.fromisoformat(a.decode()) for a, _ in stamps if a is not None]
        ends = [dt.datetime.fromisoformat(b.decode()) for _, b in stamps if b is not None]
        return (max(ends) - min(starts)).total_seconds()

    def _drain(self, worker: Worker, n: int, tag: str, wall: bool) -> tuple[float, float, float]:
        """One run: (first start -> last end, wall time, wall time of the empty-queue run, or 0 if
        not ``wall``)."""
        self._flush()
        self._clean_db()
        ids = self._enqueue(worker, n, tag)
        full = self.runner.timed(self._argv(worker), self._timeout(n))
        self._verify(worker, ids)
        span = self._span(ids)
        self._flush()
        empty = self.runner.timed(self._argv(worker), 120) if wall else 0.0
        return span, full, empty

    def throughput(self, keys: Sequence[str], wall: bool = True) -> None:
        """Drain N pre-enqueued jobs with each worker, two ways: N / (first start -> last end), and
        (``wall``) N / (wall time of the run - wall time of the same command on an empty queue)."""
        n = self.sizes.jobs
        spans: dict[str, list[float]] = {k: [] for k in keys}
        walls: dict[str, list[float]] = {k: [] for k in keys}
        for rep in range(self.sizes.repeat):
            for key in keys:
                worker = WORKERS_BY_KEY[key]
                try:
                    span, full, empty = self._drain(worker, n, f"r{rep}", wall)
                except BenchError as exc:  # keep the other runs; the failure is reported
                    self.log(f"  {key:16} rep {rep + 1}: FAILED: {exc}")
                    self.failures.append(f"throughput {key} run {rep + 1}: {exc}")
                    continue
                spans[key].append(n / span)
                if wall and full > empty:  # else start-up noise exceeded the work: no figure from this run
                    walls[key].append(n / (full - empty))
                self.log(
                    f"  {key:16} rep {rep + 1}: first start to last end {span:.2f} s: {n / span:.0f} jobs/s; "
                    f"wall {full:.2f} s, empty run {empty:.2f} s"
                )
        self.results["throughput"] = {k: statistics.median(v) for k, v in spans.items() if v}
        self.results["throughput_wall"] = {k: statistics.median(v) for k, v in walls.items() if v}
        self.results["throughput_runs"] = {"span": spans, "wall": walls}

    # --- 3. Redis commands per job ---------------------------------------------------------------

    def commands(self, keys: Sequence[str]) -> None:
        """Commands and round trips per job while draining N jobs (full run - empty run) / N."""
        n = self.sizes.jobs
        out: dict[str, dict[str, float]] = {}
        for key in keys:
            worker = WORKERS_BY_KEY[key]
            counts = []
            for jobs in (n, 0):
                self._flush()
                ids = self._enqueue(worker, jobs, "c") if jobs else []
                trace = self.workdir / f"monitor-{key}-{jobs}.log"
                reset_counters(self.client)
                with monitor(self.redis.port, trace):
                    self.runner.timed(worker.argv, self._timeout(n) * 2)
                count = read_counters(self.client)
                if ids:
                    self._verify(worker, ids)
                sent, scripted = count_monitor(trace)
                trace.unlink()
                counts.append((count, sent, scripted))
            (full, sent_f, lua_f), (empty, sent_e, lua_e) = counts
            delta: RedisCount = full - empty
            out[key] = {
                "commands": delta.commands / n,
                "sent": (sent_f - sent_e) / n,
                "scripted": (lua_f - lua_e) / n,
                "round_trips": delta.reads / n,
            }
            self.log(f"  {key:18} {out[key]}")
        # The enqueue phase, measured on its own: one batch of N (enqueue_many) per library.
        batches = {"enqueue_many_django_jobs": "runjobs_c1", "enqueue_many_rq": "simpleworker"}
        for key, worker_key in batches.items():
            worker = WORKERS_BY_KEY[worker_key]
            self._flush()
            base = self._start_count()
            self._enqueue(worker, n, "e", check=False)
            delta = self._count_since(base)
            self._expect_queued(n)
            out[key] = {"commands": delta.commands / n, "round_trips": delta.reads / n}
        self.results["commands"] = out

    # --- 4. enqueue ------------------------------------------------------------------------------

    def _enqueuer(self, lib: str) -> Callable[[int], object]:
        """One enqueue of a no-op with ``lib``: django_jobs (to each queue in turn), django-rq's
        ``on_db_commit`` queue, or a bare RQ queue."""
        if lib == "django_jobs":
            targets = self._noops()
            return lambda i: targets[i % len(targets)].enqueue(i)
        queue = (
            django_rq.get_queue(QUEUE, commit_mode="on_db_commit") if lib == "django_rq" else self._rq_queue
        )
        return lambda i: queue.enqueue(rq_noop, i)

    def enqueue_transaction(self, rq: bool = True) -> None:
        """M enqueues inside one transaction.atomic(), timed until committed and in Redis; with
        django-rq's ``on_db_commit`` beside django_jobs unless not ``rq``."""
        m = self.sizes.enqueue_tx
        libs = ("django_jobs", "django_rq") if rq else ("django_jobs",)
        times: dict[str, list[float]] = {lib: [] for lib in libs}
        self._warm_up()
        for _ in range(self.sizes.repeat):
            for lib in libs:
                self._flush()
                self._clean_db()
                enqueue = self._enqueuer(lib)
                started = time.perf_counter()
                with transaction.atomic():
                    for i in range(m):
                        enqueue(i)
                times[lib].append(time.perf_counter() - started)
                self._expect_queued(m)
            self.log(f"  transaction of {m}: " + ", ".join(f"{lib} {times[lib][-1]:.2f} s" for lib in libs))
        self._clean_db()
        self.results["enqueue_tx"] = {k: statistics.median(v) for k, v in times.items()}

    def enqueue_single(self, rq: bool = True) -> None:
        """M enqueues one by one outside any transaction: django_jobs vs bare rq.Queue.enqueue
        (unless not ``rq``)."""
        m = self.sizes.enqueue_single
        libs = ("django_jobs", "rq") if rq else ("django_jobs",)
        times: dict[str, list[float]] = {lib: [] for lib in libs}
        counts: dict[str, RedisCount] = {}
        self._warm_up()
        for _ in range(self.sizes.repeat):
            for lib in libs:
                self._flush()
                base = self._start_count()
                enqueue = self._enqueuer(lib)
                started = time.perf_counter()
                for i in range(m):
                    enqueue(i)
                times[lib].append(time.perf_counter() - started)
                counts[lib] = self._count_since(base)
                self._expect_queued(m)
            self.log(f"  {m} single enqueues: " + ", ".join(f"{lib} {times[lib][-1]:.3f} s" for lib in libs))
        self.results["enqueue_single"] = {k: statistics.median(v) for k, v in times.items()}
        self.results["enqueue_single_redis"] = {
            k: {"commands": c.commands / m, "round_trips": c.reads / m} for k, c in counts.items()
        }

    def _warm_up(self) -> None:
        """Load scripts, open connections and import code paths before anything is timed."""
        self._flush()
        for i in range(10):
            for target in self._noops():
                target.enqueue(i)
            self._rq_queue.enqueue(rq_noop, i)
        with transaction.atomic():
            for target in self._noops():
                target.enqueue(0)
            django_rq.get_queue(QUEUE, commit_mode="on_db_commit").enqueue(rq_noop, 0)
        self._flush()
        self._clean_db()

    def _start_count(self) -> RedisCount:
        """Reset the counters of every Redis; returns what reading them costs, to subtract later."""
        base = RedisCount(0, 0)
        for client in self._clients():
            reset_counters(client)
            base += read_counters(client)
            reset_counters(client)
        return base

    def _count_since(self, base: RedisCount) -> RedisCount:
        """Commands and round trips on every Redis since :meth:`_start_count` returned ``base``."""
        return sum((read_counters(client) for client in self._clients()), RedisCount(0, 0)) - base

    def _expect_queued(self, m: int) -> None:
        queued = self._queued()
        if queued != m:
            raise BenchError(f"expected {m} jobs in Redis, found {queued}")

    # --- 5. latency ------------------------------------------------------------------------------

    def latency(self, due: bool = True) -> None:
        """Enqueue-to-start with idle runjobs (c=2), probes to each queue in turn, and (``due``)
        due-to-start of enqueue_in() jobs."""
        path = self.workdir / "probes.log"
        path.unlink(missing_ok=True)
        process = self._start_runjobs(2)
        try:
            sent = self._probes(path)
            due_at = self._due_probes(path) if due else {}
            total = len(sent) + len(due_at)
            wait_until(
                lambda: alive(process) and path.exists() and len(path.read_text().splitlines()) >= total,
                60,
                "the probes to run",
            )
        finally:
            stop(process)
        started = {int(a): float(b) for a, b in (line.split() for line in path.read_text().splitlines())}
        waits = [(started[i] - t) * 1000 for i, t in sent.items()]
        self.results["latency"] = {
            "p50_ms": percentile(waits, 50),
            "p99_ms": percentile(waits, 99),
            "max_ms": max(waits),
        }
        if due:
            lates = [(started[j] - t) * 1000 for j, t in due_at.items()]
            self.results["latency"] |= {
                "due_p50_ms": percentile(lates, 50),
                "due_max_ms": max(lates),
                "due_within_1s": sum(0 <= x < 1000 for x in lates),
                "due_early": sum(x < 0 for x in lates),
                "due_count": len(lates),
            }
        self.log(f"  {self.results['latency']}")

    def _probes(self, path: Path) -> dict[int, float]:
        """One probe every PROBE_INTERVAL, to each queue in turn; returns when each was sent."""
        targets = [probe] if len(self.servers) == 1 else [probe.options(queue=q) for q in self.queues]
        sent: dict[int, float] = {}
        tick = time.perf_counter()
        for i in range(self.sizes.probes):
            tick += PROBE_INTERVAL
            time.sleep(max(tick - time.perf_counter(), 0))
            sent[i] = time.time()
            targets[i % len(targets)].enqueue(i, str(path))
        return sent

    def _due_probes(self, path: Path) -> dict[int, float]:
        """``enqueue_in(DUE_DELAY)`` probes; returns when each is due."""
        due: dict[int, float] = {}
        for i in range(self.sizes.due_probes):
            j = 1_000_000 + i
            due[j] = time.time() + DUE_DELAY
            probe.enqueue_in(DUE_DELAY, j, str(path))
            time.sleep(0.137)  # not a multiple of the maintenance interval: sample every phase of it
        return due

    # --- 6. memory -------------------------------------------------------------------------------

    def memory(self) -> None:
        """RSS of each runjobs work process after the first jobs and after many more."""
        first, total = self.sizes.memory_first, self.sizes.memory_jobs
        process = self._start_runjobs(2)
        try:
            idle = self._rss(process.pid)
            self._feed(process, first, 0)
            early = self._rss(process.pid)
            cpu_before = self._cpu(process.pid)
            started = time.perf_counter()
            self._feed(process, total - first, first)
            elapsed = time.perf_counter() - started
            cpu_after = self._cpu(process.pid)
            late = self._rss(process.pid)
        finally:
            stop(process)
        # Growth is judged on the processes that ran from the first jobs to the last.
        throughout = [pid for pid in late if pid in early]
        replaced = len(late) - len(throughout)
        if replaced:
            self.log(f"  {replaced} work process(es) were replaced during the run")
        self.results["memory"] = {
            "idle_mib": list(idle.values()),
            "early_mib": list(early.values()),
            "late_mib": list(late.values()),
            "replaced": replaced,
            "ratio": max(late[p] / early[p] for p in throughout) if throughout else None,
            "sustained_jobs_s": (total - first) / elapsed,
            # CPU microseconds per job: supervisor, work processes (together), redis-server. A
            # replaced process takes its CPU time with it, so then there is no figure.
            "cpu_us_per_job": None
            if replaced
            else [(b - a) / (total - first) * 1e6 for a, b in zip(cpu_before, cpu_after, strict=True)],
        }
        self.log(f"  {self.results['memory']}")

    @staticmethod
    def _rss(supervisor: int) -> dict[int, float]:
        return {pid: rss_mib(pid) for pid in children(supervisor)}

    def _cpu(self, supervisor: int) -> tuple[float, float, float]:
        """CPU seconds so far of the supervisor, of its work processes together, and of Redis."""
        workers = sum(cpu_seconds(pid) for pid in children(supervisor))
        return cpu_seconds(supervisor), workers, redis_cpu_seconds(self.client)

    def _feed(self, process: Process, n: int, offset: int) -> None:
        """Enqueue ``n`` no-op jobs while the workers run (at most ~10,000 waiting), then wait them out."""
        for start in range(offset, offset + n, 5000):
            wait_until(
                lambda: alive(process) and self.client.llen(queue_key(QUEUE)) < 5000,
                600,
                "the queue to drain",
            )
            noop.enqueue_many([(i,) for i in range(start, min(start + 5000, offset + n))])
        # A job whose work process was killed holds its lease until it expires: allow for that.
        wait_until(
            lambda: (
                alive(process) and self.client.llen(queue_key(QUEUE)) == 0 and self.client.zcard(LEASES) == 0
            ),
            600,
            "the workers to finish",
        )

    # --- health ----------------------------------------------------------------------------------

    def health(self) -> None:
        """What the runjobs logs say went wrong: healthy work processes killed by the lease fence,
        and attempts counted as lost. Both should be zero in every benchmark."""
        self.results["health"] = {
            "fence_kills": self.runner.count_lines("runjobs", "was taken back"),
            "lost": self.runner.count_lines("runjobs", "outcome=lost"),
            "crash_loops": self.runner.count_lines("runjobs", "times in a minute"),
        }
