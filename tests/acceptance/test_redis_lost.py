"""Redis loses everything while two ``runjobs --concurrency 2`` drain a backlog: its database flushed
(``FLUSHDB``), or the server SIGKILLed and started again empty on its port (no RDB, no AOF), with
jobs enqueued while it is down. The fault takes jobs waiting, delayed (the scheduled set), retrying,
running and finished alike.

At the package's default durability level (the test sets none) every committed job runs at least
once: the ledger pushes again what Redis lost, and the rows of jobs enqueued while Redis was down
once it answers. At "fast" the jobs only Redis had are lost, measured so the hole stays in sight.
The enqueues alternate in and out of transactions; one in five is delayed, one in five fails once
before it succeeds, one in ten is dead-lettered, and a few come right before the fault.

Figures per run (printed, and written to ``var/redis-lost-<fault>-<level>-<database>.json``): jobs
lost, runs beyond those needed, and per fault the seconds until every job it took was back in Redis,
until those not delayed had ended, and until all had. ``JOBS_REDIS_LOST_JOBS`` (240),
``JOBS_REDIS_LOST_ROUNDS`` (1 fault), ``JOBS_REDIS_LOST_DELAY`` (6 s, a delayed job's wait) and
``JOBS_CHAOS_OUTAGE_SECONDS`` (3 s down) make a long run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import pytest
import redis
from django.db import connection

from django_jobs import pause
from django_jobs.conf import jobs_settings
from django_jobs.flow import pausing
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import Store
from tests.chaos import RedisServer, converged, enqueue_alternating
from tests.conftest import OUTAGE_SECONDS, ROOT, Runjobs, wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

JOBS = int(os.environ.get("JOBS_REDIS_LOST_JOBS", "240"))
ROUNDS = int(os.environ.get("JOBS_REDIS_LOST_ROUNDS", "1"))
DELAY = float(os.environ.get("JOBS_REDIS_LOST_DELAY", "6"))
#: Jobs of each round enqueued right before its fault.
FRESH = max(5, JOBS // ROUNDS // 20)
#: Seconds without a change after which a level that loses jobs is taken to have recovered all it will.
QUIET = 8.0
#: The ledger's log line of a sweep's pushes.
REPUSHED = re.compile(r"Ledger: (\d+) job\(s\) missing from Redis were pushed again")


@dataclass
class Figures:
    fault: str
    level: str
    database: str
    jobs: int = 0
    rounds: int = 0
    lost: int = 0
    duplicates: int = 0  # runs beyond those a job needs (a retried job needs two)
    dead_lettered: int = 0
    repushed: int = 0  # pushes the ledger's sweeps logged (a job both runjobs pushed counts twice)
    down_seconds: float = 0.0  # how long a restarted Redis was down
    enqueued_while_down: int = 0
    at_fault: list[dict[str, int]] = field(default_factory=list)  # Redis at each fault, and what it took
    # Seconds from each fault (the kill, for a restart) until every job it took...
    back_seconds: list[float | None] = field(default_factory=list)  # ...is in Redis again or ended
    recovery_seconds: list[float | None] = field(default_factory=list)  # ...not delayed has ended
    ended_seconds: list[float | None] = field(default_factory=list)  # ...has ended, delayed ones when due


class Load:
    """The test's jobs: each key's job id, the runs it needs, and whether it ends as a dead letter."""

    def __init__(self) -> None:
        self.committed: dict[str, tuple[str, int]] = {}
        self.dead: set[str] = set()
        self.delayed: set[str] = set()

    def one(self) -> None:
        i = len(self.committed)
        key = f"j{i}"
        if i % 20 in (0, 11):
            kind, args, needs = jobs.permanent, (key,), 1
            self.dead.add(key)
        elif i % 10 in (2, 7):
            kind, args, needs = jobs.failover, (key, 1, 0.02), 2  # fails once, then succeeds
        else:
            kind, args, needs = jobs.failover, (key, 0, 0.02), 1
        enqueue = kind.enqueue
        if i % 10 in (4, 5):
            enqueue = kind.options(delay=DELAY).enqueue
            self.delayed.add(key)
        handle = enqueue_alternating(i, enqueue, *args)
        self.committed[key] = (handle.id, needs)

    def burst(self, count: int) -> None:
        for _ in range(count):
            self.one()

    def unended(self) -> set[str]:
        """Keys whose job has not ended as it should: no side effect, or no dead letter."""
        effects = set(SideEffect.objects.exclude(key__regex=r"^(run|attempt):").values_list("key", flat=True))
        dead = set(DeadLetter.objects.values_list("job_id", flat=True))
        return {
            key
            for key, (job_id, _) in self.committed.items()
            if (job_id not in dead if key in self.dead else key not in effects)
        }

    def duplicates(self) -> int:
        runs = Counter(
            k.removeprefix("run:").removeprefix("attempt:")
            for k in SideEffect.objects.filter(key__regex=r"^(run|attempt):").values_list("key", flat=True)
        )
        return sum(max(0, runs[key] - needs) for key, (_, needs) in self.committed.items())


def restart_empty(server: RedisServer, load: Load, figures: Figures) -> None:
    """SIGKILL the server, enqueue while it is down, start it again on its port without its files."""
    down = time.monotonic()
    server.close()
    for path in server.directory.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    count = max(10, JOBS // ROUNDS // 10)
    load.burst(count)
    figures.enqueued_while_down += count
    figures.down_seconds = OUTAGE_SECONDS
    time.sleep(max(0.0, down + OUTAGE_SECONDS - time.monotonic()))
    server.start()


def recover(store: Store, load: Load, taken: set[str], fault: float, loses: bool) -> dict[str, float | None]:
    """Seconds from the fault until every job it took is in Redis again or ended ("back"), until each
    not delayed has ended ("recovery"), and until all have ("ended"); None for what never came (at a
    level that loses jobs: once nothing changed for QUIET seconds)."""
    times: dict[str, float | None] = dict.fromkeys(("back", "recovery", "ended"))
    last, since = len(taken), time.monotonic()
    while True:
        left = load.unended() & taken
        now = round(time.monotonic() - fault, 2)
        if (
            times["back"] is None
            and None not in store.statuses([load.committed[k][0] for k in left]).values()
        ):
            times["back"] = now
        if times["recovery"] is None and not left - load.delayed:
            times["recovery"] = now
        if not left:
            times["ended"] = now
            return times
        if len(left) != last:
            last, since = len(left), time.monotonic()
        elif loses and time.monotonic() - since > QUIET:
            return times
        time.sleep(0.1)


def drain_through(
    fault: str, server: RedisServer, runjobs: Callable[..., Runjobs], env: dict[str, str]
) -> tuple[Figures, Load]:
    level = jobs_settings.durability("default")
    figures = Figures(fault, level, connection.vendor, rounds=ROUNDS)
    client = redis.Redis.from_url(server.url)  # no timeout: the test waits out a slow Redis
    workers = [
        runjobs("--concurrency", "2", extra_env={"JOBS_TEST_REDIS_URL": server.url, **env}) for _ in range(2)
    ]
    jobs.record.enqueue("ready")
    wait_for(lambda: SideEffect.objects.filter(key="ready").exists(), timeout=60)
    load = Load()
    for _ in range(ROUNDS):
        gone = load.unended()  # lost in an earlier round, at a level that loses jobs
        wanted = len(load.committed) - len(gone) + JOBS // ROUNDS // 4  # ended when the fault comes
        load.burst(JOBS // ROUNDS)
        wait_for(lambda n=wanted: len(load.committed) - len(load.unended()) >= n, timeout=120)
        # The queue is paused (every runjobs sees it within pausing.REFRESH), so the fault finds jobs
        # waiting in it whatever the machine's speed; the fault takes the pause with the rest.
        pause(queue="default", reason="the fault must find jobs waiting")
        time.sleep(pausing.REFRESH + 0.2)
        load.burst(FRESH)  # committed just before the fault: their rows are younger than a second
        figures.at_fault.append({**converged(client), "ended": len(load.committed) - len(load.unended())})
        at = time.monotonic()
        if fault == "flushdb":
            client.flushdb()
        else:
            restart_empty(server, load, figures)
        taken = load.unended() - gone
        figures.at_fault[-1]["taken"] = len(taken)
        times = recover(Store(client), load, taken, at, loses=level == "fast")
        figures.back_seconds.append(times["back"])
        figures.recovery_seconds.append(times["recovery"])
        figures.ended_seconds.append(times["ended"])
    figures.jobs = len(load.committed)
    figures.lost = len(load.unended())
    figures.duplicates = load.duplicates()
    figures.dead_lettered = DeadLetter.objects.count()
    figures.repushed = sum(int(n) for w in workers for n in REPUSHED.findall(w.output()))
    name = f"redis-lost-{fault}-{level}-{connection.vendor}.json"
    (ROOT / "var" / name).write_text(json.dumps(asdict(figures), indent=1))
    print(f"\nRedis lost ({fault}) at {level} on {connection.vendor}: {asdict(figures)}")
    for at_fault in figures.at_fault:  # the fault took jobs in each state
        assert at_fault["queued"] and at_fault["scheduled"] and at_fault["ended"], figures
    wait_for(lambda: set(converged(client).values()) == {0}, timeout=60)
    for worker in workers:
        assert worker.proc.poll() is None, worker.output()[-3000:]  # lived through it
    return figures, load


@pytest.mark.parametrize("fault", ["flushdb", "restart"])
def test_no_committed_job_is_lost_when_redis_loses_its_data_at_the_default_level(
    fault, private_redis, runjobs
):
    figures, load = drain_through(fault, private_redis, runjobs, {})
    assert figures.lost == 0, figures
    assert figures.repushed > 0  # the fault took jobs only the ledger still had
    assert figures.dead_lettered == len(load.dead)
    wait_for(lambda: not OutboxEntry.objects.exists(), timeout=60)  # every row settled once its job ended


@pytest.mark.parametrize("fault", ["flushdb", "restart"])
def test_fast_loses_what_only_redis_had(fault, fast, private_redis, runjobs):
    """The hole the default level closes, measured: jobs only Redis held are gone."""
    figures, _ = drain_through(fault, private_redis, runjobs, {"JOBS_TEST_DURABILITY": "fast"})
    assert figures.lost > 0
