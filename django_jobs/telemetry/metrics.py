# prometheus_client's multi-process helpers carry no type hints.
# mypy: disable-error-code="no-untyped-call"
"""Prometheus metrics of the worker: per job type, like an endpoint's.

They are process-local by default, which is what in-process runs (tests, ``run_jobs()``) need.
``runjobs --metrics-port`` calls :func:`use_multiprocess` before any job runs: from then on this
process and every work process it forks write their values to memory-mapped files in one directory,
and the supervisor's endpoint sums them. Counters of a work process that exited are folded into
one file, so the directory does not grow with every recycled process and no counter goes backwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from django_jobs.store import Pause

JOBS_TOTAL = Counter(
    "django_jobs_jobs",
    "Job attempts by outcome (success, retry, dead, timeout, lost, cancelled, snoozed), and jobs dropped "
    "unrun because they expired (expired).",
    ["job", "queue", "outcome"],
)
DURATION = Histogram(
    "django_jobs_job_duration_seconds",
    "Run time of job attempts.",
    ["job", "queue"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
QUEUE_WAIT = Histogram(
    "django_jobs_queue_wait_seconds",
    "Time from enqueue to start.",
    ["job", "queue"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 1800, 3600),
)
BUSY = Gauge(
    "django_jobs_worker_busy", "Worker processes running a job.", ["queue"], multiprocess_mode="livesum"
)
FENCED = Counter(
    "django_jobs_fenced_attempts",
    "Attempts the supervisor killed so that a job never runs twice at once: its lease was taken back "
    "(lease_gone), or no heartbeat reached Redis in time to keep it (deadline).",
    ["queue", "reason"],
)
#: The ``reason`` label of FENCED.
FENCE_REASONS = ("lease_gone", "deadline")
VANISHED = Counter(
    "django_jobs_vanished_jobs",
    "Job ids popped from a queue whose hash was gone (evicted or deleted), dead-lettered as vanished.",
    ["queue"],
)
UNREPLICATED = Counter(
    "django_jobs_unreplicated_pushes",
    'Jobs of "replicated" queues whose push no enough replicas confirmed within REPLICA_TIMEOUT: they '
    "keep an outbox row that the relay re-pushes until replicas confirm it.",
    ["queue"],
)
LEDGER_REPUSHED = Counter(
    "django_jobs_ledger_repushed",
    "Ledger jobs that were missing from Redis (a failover, a restart, a failed push) and were pushed again.",
    ["queue"],
)
LEDGER_SETTLED = Counter(
    "django_jobs_ledger_settled", "Ledger rows removed because their job finished.", ["queue"]
)
REDIS_UP = Gauge(
    "django_jobs_worker_redis_up",
    "1 while runjobs reaches a Redis server whose queues it serves, 0 while it has set the server aside "
    "as down (its queues wait; the other servers' are served).",
    ["server"],
    multiprocess_mode="livemax",
)
BATCH_CALLBACKS = Counter(
    "django_jobs_batch_callbacks",
    "Batch callbacks enqueued, once per batch and kind: on_success (every member succeeded) and "
    "on_complete (every member ended).",
    ["kind"],
)
#: The ``kind`` label of BATCH_CALLBACKS.
BATCH_CALLBACK_KINDS = ("success", "complete")
_ALL = (
    JOBS_TOTAL,
    DURATION,
    QUEUE_WAIT,
    BUSY,
    FENCED,
    VANISHED,
    UNREPLICATED,
    LEDGER_REPUSHED,
    LEDGER_SETTLED,
    REDIS_UP,
    BATCH_CALLBACKS,
)
#: Counters, histograms and summaries add up across processes, so dead processes' files can be merged.
_ADDITIVE = ("counter", "histogram", "summary")

_directory: str | None = None
#: Held while the endpoint reads the files and while a dead process's files are folded, so a
#: scrape never sees a value twice or not at all.
_files_lock = threading.Lock()


#: The labelled values a work process updates on every job, by (metric, labels): ``labels()`` takes a
#: lock and checks its arguments on every call, which costs more than the update.
_children: dict[tuple[MetricWrapperBase, tuple[str, ...]], Any] = {}


def _child(metric: MetricWrapperBase, *labels: str) -> Any:
    child = _children.get((metric, labels))
    if child is None:
        child = _children[(metric, labels)] = metric.labels(*labels)
    return child


def started(job: str, queue: str, wait: float | None) -> None:
    if wait is not None:
        _child(QUEUE_WAIT, job, queue).observe(wait)
    _child(BUSY, queue).inc()


def finished(job: str, queue: str, outcome: str, duration: float) -> None:
    _child(BUSY, queue).dec()
    _child(JOBS_TOTAL, job, queue, outcome).inc()
    _child(DURATION, job, queue).observe(duration)


def settled(job: str, queue: str, outcome: str, duration: float | None = None) -> None:
    """An outcome decided outside the work process (hard timeout, lost worker, a cancel's kill): its
    busy gauge went with that process; ``duration``, if it ran, until it was killed."""
    _child(JOBS_TOTAL, job, queue, outcome).inc()
    if duration is not None:
        _child(DURATION, job, queue).observe(duration)


def fenced(queue: str, reason: str) -> None:
    """The supervisor killed an attempt that might otherwise run alongside a second one."""
    FENCED.labels(queue, reason).inc()


def vanished(queue: str) -> None:
    VANISHED.labels(queue).inc()


def unreplicated(queue: str, count: int) -> None:
    UNREPLICATED.labels(queue).inc(count)


def ledger(queue: str, *, repushed: int = 0, settled: int = 0) -> None:
    LEDGER_REPUSHED.labels(queue).inc(repushed)
    LEDGER_SETTLED.labels(queue).inc(settled)


def batch_callback(kind: str) -> None:
    """A batch fired: its callback of this kind was enqueued."""
    BATCH_CALLBACKS.labels(kind).inc()


def pause_families(queues: Iterable[str], pauses: Iterable[Pause], now: float) -> list[GaugeMetricFamily]:
    """The pause gauges, read at scrape time by the web side and by ``runjobs --metrics-port`` alike:
    seconds each of ``queues`` has been paused (0 while it runs), and each paused job type."""
    queue = GaugeMetricFamily(
        "django_jobs_queue_paused_seconds",
        "Seconds since the queue was paused (0 while it runs): its jobs wait, no worker takes them.",
        labels=["queue"],
    )
    job = GaugeMetricFamily(
        "django_jobs_job_paused_seconds",
        "Seconds since the job type was paused (only paused types): its jobs are parked as they come up.",
        labels=["job"],
    )
    ages: dict[tuple[str, str], float] = {("queue", name): 0.0 for name in queues}
    for pause in pauses:
        if pause.kind == "job" or (pause.kind, pause.name) in ages:
            ages[pause.kind, pause.name] = max(ages.get((pause.kind, pause.name), 0.0), pause.seconds(now))
    for (kind, name), seconds in sorted(ages.items()):
        (queue if kind == "queue" else job).add_metric([name], seconds)
    return [queue, job]


def redis_up(server: str, up: bool) -> None:
    """runjobs found a server it serves down (``up`` False), or answering again."""
    REDIS_UP.labels(server).set(1 if up else 0)


def use_multiprocess(directory: str) -> None:
    """Keep this process's values, and those of processes it forks later, in ``directory``.

    prometheus_client picks its value class when it is imported, long before ``runjobs`` parses
    ``--metrics-port``; the labelled metrics create their values on first use, so switching the
    class here, before any job runs, is early enough. Values created before are dropped, and a
    ``PROMETHEUS_MULTIPROC_DIR`` set for another server (a web server's) is not shared.
    """
    global _directory
    for metric in _ALL:
        metric.clear()
    _children.clear()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _directory = directory
    values.ValueClass = values.MultiProcessValue()  # a fresh one: its files go to ``directory``


def initialise(
    queues: Sequence[str],
    jobs: Iterable[tuple[str, str]],
    outcomes: Iterable[str],
    servers: Iterable[str] = (),
) -> None:
    """Create every series at zero, so ``rate()`` and ``increase()`` see a job's first failure; each
    server is up until runjobs finds it down."""
    outcomes = list(outcomes)
    for server in servers:
        REDIS_UP.labels(server).set(1)
    for kind in BATCH_CALLBACK_KINDS:
        BATCH_CALLBACKS.labels(kind)
    for queue in queues:
        BUSY.labels(queue).set(0)
        VANISHED.labels(queue)
        UNREPLICATED.labels(queue)
        LEDGER_REPUSHED.labels(queue)
        LEDGER_SETTLED.labels(queue)
        for reason in FENCE_REASONS:
            FENCED.labels(queue, reason)
    for job, queue in jobs:
        if queue in queues:
            for outcome in outcomes:
                JOBS_TOTAL.labels(job, queue, outcome)
            DURATION.labels(job, queue)
            QUEUE_WAIT.labels(job, queue)


class _Files:
    """The collector of the worker's endpoint: every process's files, summed."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterable[Metric]:
        with _files_lock:
            files = [path for path in glob.glob(os.path.join(self.directory, "*.db")) if _begun(path)]
            return list(MultiProcessCollector.merge(files, accumulate=True))


def _begun(path: str) -> bool:
    """Whether a process's file has been sized yet: one that a new work process is creating at this
    very moment is still empty, and reading it would fail the whole scrape (it holds no value yet)."""
    try:
        return os.path.getsize(path) > 0
    except FileNotFoundError:
        return False


def registry(*collectors: Any) -> CollectorRegistry:
    """The registry ``runjobs`` serves: the sum over the supervisor and all its work processes, and
    ``collectors`` read at scrape time (the pause gauges)."""
    if _directory is None:
        raise RuntimeError("use_multiprocess() was not called")
    combined = CollectorRegistry()
    combined.register(_Files(_directory))
    for collector in collectors:
        combined.register(collector)
    return combined


def retire(pid: int) -> None:
    """Forget an exited process's gauges and fold its counters and histograms into the totals."""
    if _directory is None:
        return
    with _files_lock:
        mark_process_dead(pid, _directory)
        for kind in _ADDITIVE:
            dead = os.path.join(_directory, f"{kind}_{pid}.db")
            if os.path.exists(dead):
                _fold(dead, os.path.join(_directory, f"{kind}_retired.db"))


def _fold(dead: str, total: str) -> None:
    merged = MultiProcessCollector.merge([total, dead] if os.path.exists(total) else [dead], accumulate=False)
    partial = total + ".partial"  # not *.db: a scrape never reads it
    with contextlib.suppress(FileNotFoundError):
        os.remove(partial)  # left by a fold that was interrupted
    folded = MmapedDict(partial)
    try:
        for metric in merged:
            for sample in metric.samples:
                key = mmap_key(
                    metric.name,
                    sample.name,
                    list(sample.labels),
                    list(sample.labels.values()),
                    metric.documentation,
                )
                folded.write_value(key, sample.value, 0.0)
    finally:
        folded.close()
    os.replace(partial, total)
    os.remove(dead)
