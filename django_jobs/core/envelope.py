"""What moves between enqueue, the outbox and the backends: an envelope per job and the options it
was enqueued with. Below all three, so none imports another."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django_jobs.store import Status, rq_timestamp, valid_job_id
from django_jobs.store.lifecycle import F

Call = tuple[Sequence[Any], Mapping[str, Any]]

#: Django's ``django.tasks`` range: among the ready jobs of a queue the higher priority starts first.
MIN_PRIORITY, MAX_PRIORITY = -100, 100


def check_priority(value: object, where: str) -> int:
    """``value`` if it is a priority; otherwise a ValueError that says so, ``where`` first."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise ValueError(
            f"{where}: priority must be an int from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(higher runs first, default 0), got {value!r}."
        )
    return value


def check_expires(value: object, where: str) -> float:
    """``value`` (seconds or a timedelta) as positive, finite seconds; otherwise a ValueError."""
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < math.inf:
        raise ValueError(
            f"{where}: expires is a positive number of seconds or a timedelta after the enqueue "
            f"(options() also takes an aware datetime), got {value!r}."
        )
    return float(seconds)


def expiry(value: float | dt.timedelta | dt.datetime) -> tuple[float, float]:
    """``options(expires=...)``: (seconds after the enqueue, 0), or (0, Unix time) for an aware datetime."""
    if not isinstance(value, dt.datetime):
        return check_expires(value, "options()"), 0.0
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"options(expires=...) needs an aware datetime, got the naive {value!r}.")
    return 0.0, value.timestamp()


@dataclass(frozen=True)
class Envelope:
    """One job ready to push: the same data whether it comes from a call or an outbox row."""

    id: str
    name: str
    queue: str
    data: str
    timeout: int
    due: float
    created_at: dt.datetime
    unique_key: str = ""
    debounce: float = 0.0
    cron_run: int | None = None
    priority: int = 0
    trace: str = ""  # the enqueuer's trace context (tracing.carrier()), "" outside a trace
    expires: float = 0.0  # Unix time after which it is dropped unrun if it has not started; 0: never
    batch: str = ""  # the id of the batch the job is a member of (see ``batches``), "" for most jobs
    limit_key: str = ""  # the key its job type's limits count it under (@job(limit_key=...)), or ""

    def __post_init__(self) -> None:
        # Every id is made here or read back from an outbox row: refuse one that breaks the id rule.
        if not valid_job_id(self.id):
            raise ValueError(
                f"Job id {self.id[:100]!r} is not valid: letters, digits, _ and -, 1 to 64 of them."
            )
        check_priority(self.priority, f"Job {self.id}")

    def fields(self) -> dict[str, Any]:
        stamp = rq_timestamp(self.created_at)
        extra: dict[str, Any] = {F.CRON: self.cron_run} if self.cron_run is not None else {}
        if self.priority:  # only then: a plain job's hash stays as it was
            extra[F.PRIORITY] = self.priority
        if self.trace:
            extra[F.TRACE] = self.trace
        if self.limit_key:
            extra[F.LIMIT_KEY] = self.limit_key
        if self.expires:
            extra[F.EXPIRES] = f"{self.expires:.3f}"
        if self.batch:
            extra[F.BATCH] = self.batch
        return {
            **extra,
            "data": self.data,
            "created_at": stamp,
            "enqueued_at": stamp,
            "status": Status.QUEUED.value,
            "origin": self.queue,
            "description": self.name,
            "timeout": self.timeout,
            F.ATTEMPT: 0,
        }

    def options(self) -> dict[str, Any]:
        """The outbox row's ``options``; the priority, the trace, the expiry, the batch and the limit key
        have columns of their own, which a relay that predates them ignores, where an option it did not
        know would make it quarantine the row."""
        return {
            key: value
            for key, value in (
                ("unique_key", self.unique_key),
                ("debounce", self.debounce),
                ("cron_run", self.cron_run),
            )
            if value
        }


@dataclass(frozen=True)
class Options:
    """How to enqueue, beyond the arguments."""

    delay: float = 0.0  # seconds from now
    unique_key: str = ""  # at most one queued or running job per key
    debounce: float = 0.0  # with unique_key: wait this long; a newer enqueue within it replaces this one
    cron_run: int | None = None  # the CronRun this job fires
    queue: str = ""  # another queue than the job's own
    priority: int | None = None  # None: the job type's own
    expires_in: float = 0.0  # seconds after the enqueue: not started by then, it is dropped unrun
    expires_at: float = 0.0  # or a Unix time; 0 for both: the job type's own expiry, if any
    batch: str = ""  # the batch whose block enqueues the job (set by enqueue, never by a caller)

    def __post_init__(self) -> None:
        if self.priority is not None:
            check_priority(self.priority, "options()")
        if self.debounce and not self.unique_key:
            raise ValueError("debounce= needs unique_key=: the key says which enqueues replace each other.")
        if self.unique_key and len(self.unique_key) > 200:
            raise ValueError("unique_key= is at most 200 characters.")
