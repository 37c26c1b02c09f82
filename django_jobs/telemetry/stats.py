"""Per-job-type outcome counters in Redis: the overview's "last hour / last day" and its chart.

No table of outcomes exists, and none is needed: each settled attempt adds one to two small hashes,

* ``djjobs:stats:m:<YYYYmmddHHMM>`` per minute, kept two hours (the sliding last hour), and
* ``djjobs:stats:h:<YYYYmmddHH>`` per hour, kept 26 hours (the last day, and the chart's bars),

with fields ``<job name>|<outcome>``, on the Redis server of the job's queue (the overview adds every
server's up). Reading costs 84 HGETALLs in one round trip per server, however many jobs ran.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from redis import Redis
from redis.exceptions import RedisError

from django_jobs.exceptions import ConfigurationError
from django_jobs.store import keys

logger = logging.getLogger("django_jobs.stats")

MINUTE_TTL = 2 * 3600
HOUR_TTL = 26 * 3600
HOURS = 24
SUCCESS = "success"
CANCELLED = "cancelled"
SNOOZED = "snoozed"
EXPIRED = "expired"


minute_key = keys.stats_minute
hour_key = keys.stats_hour


# Outcomes recorded in this process and not yet written: (queue, minute, "<job>|<outcome>") -> count.
# Work processes add one per job and write them in one pipeline per Redis server at most once a
# second, so the counters cost no Redis round trip per job. Each count goes to its queue's server.
_pending: Counter[tuple[str, dt.datetime, str]] = Counter()
#: A work process's lanes (``async def`` jobs side by side) count outcomes from their own threads.
_lock = threading.Lock()
_flushed_at = 0.0
FLUSH_EVERY = 1.0


#: The current minute: (its start as a POSIX time, its start), worked out once a minute, not per job.
_minute = (0.0, dt.datetime.fromtimestamp(0, dt.UTC))


def _this_minute() -> dt.datetime:
    global _minute
    stamp = time.time()
    start, minute = _minute
    if not start <= stamp < start + 60:
        start = stamp - stamp % 60
        minute = dt.datetime.fromtimestamp(start, dt.UTC)
        _minute = (start, minute)
    return minute


def record(job: str, outcome: str, queue: str, now: dt.datetime | None = None) -> None:
    """Count one attempt's outcome (``outcomes.Outcome`` values), to be written by :func:`flush`."""
    minute = _this_minute() if now is None else now.replace(second=0, microsecond=0)
    with _lock:
        _pending[(queue, minute, f"{job}|{outcome}")] += 1


def flush(where: Callable[[str], Redis | None], *, every: float = FLUSH_EVERY) -> None:
    """Write the recorded outcomes if ``every`` seconds passed since the last write, each to the Redis
    ``where(queue)`` names (None: not now, e.g. that server is down). Best effort: what a Redis did
    not take is kept for the next call, and nothing is raised."""
    global _flushed_at
    if not _pending or time.monotonic() - _flushed_at < every:
        return
    servers: dict[int, tuple[Redis, dict[tuple[str, dt.datetime, str], int]]] = {}
    with _lock:
        pending = list(_pending.items())
    for item, n in pending:
        try:
            connection = where(item[0])
        except ConfigurationError:  # no queue at all to write to: keep the counts
            continue
        if connection is not None:
            servers.setdefault(id(connection), (connection, {}))[1][item] = n
    for connection, batch in servers.values():
        try:
            _write(connection, batch)
        except RedisError as exc:
            logger.debug("Outcome counters not written yet: %s", exc)
            continue
        with _lock:
            _pending.subtract(batch)
    with _lock:
        for item in [k for k, v in _pending.items() if v <= 0]:
            del _pending[item]
    _flushed_at = time.monotonic()  # a server that failed is tried again in a second, not at every job


def _write(connection: Redis, batch: dict[tuple[str, dt.datetime, str], int]) -> None:
    """Add ``batch`` to one server's minute and hour hashes, in one pipeline."""
    with connection.pipeline(transaction=False) as pipe:
        keys: dict[str, int] = {}
        for (_, minute, name), n in batch.items():
            for key, ttl in ((minute_key(minute), MINUTE_TTL), (hour_key(minute), HOUR_TTL)):
                pipe.hincrby(key, name, n)
                keys[key] = ttl
        for key, ttl in keys.items():
            pipe.expire(key, ttl)
        pipe.execute()


def forget() -> None:
    """Drop what this process recorded: a forked child must not write its parent's counts again."""
    _pending.clear()


def count(connection: Redis, job: str, outcome: str, now: dt.datetime | None = None) -> None:
    """Record one outcome and write everything recorded at once, to ``connection``."""
    record(job, outcome, "", now)
    flush(lambda queue: connection, every=0)


@dataclass
class Tally:
    successes: int = 0
    failures: int = 0
    """Failed attempts of any kind: retried, timed out, lost or dead-lettered."""
    cancelled: int = 0
    """Attempts ended by a cancel: asked for, so not failures."""
    snoozed: int = 0
    """Attempts that snoozed: the job runs again later; not failures."""
    expired: int = 0
    """Jobs dropped unrun because they had not started by their expiry: no attempt, no failure."""

    def add(self, outcome: str, n: int) -> None:
        if outcome == SUCCESS:
            self.successes += n
        elif outcome == CANCELLED:
            self.cancelled += n
        elif outcome == SNOOZED:
            self.snoozed += n
        elif outcome == EXPIRED:
            self.expired += n
        else:
            self.failures += n


@dataclass
class JobStats:
    hour: Tally = field(default_factory=Tally)
    day: Tally = field(default_factory=Tally)
    hourly: list[Tally] = field(default_factory=lambda: [Tally() for _ in range(HOURS)])
    """One bucket per hour, oldest first; the last is the current hour."""


def read(connection: Redis, now: dt.datetime, into: dict[str, JobStats]) -> None:
    """Add this connection's counters to ``into`` (job name -> stats); read-only."""
    minutes = [minute_key(now - dt.timedelta(minutes=i)) for i in range(60)]
    hours = [hour_key(now - dt.timedelta(hours=HOURS - 1 - i)) for i in range(HOURS)]
    with connection.pipeline(transaction=False) as pipe:
        for key in minutes + hours:
            pipe.hgetall(key)
        replies: list[dict[bytes, bytes]] = pipe.execute()
    for index, reply in enumerate(replies):
        for raw_name, raw_count in reply.items():
            job, _, outcome = raw_name.decode(errors="replace").rpartition("|")
            stats = into.setdefault(job, JobStats())
            n = int(raw_count)
            if index < len(minutes):
                stats.hour.add(outcome, n)
            else:
                stats.day.add(outcome, n)
                stats.hourly[index - len(minutes)].add(outcome, n)
