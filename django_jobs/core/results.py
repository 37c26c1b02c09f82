"""What a caller can learn about a job by its id, from any process: :class:`JobHandle` (what
enqueue returns) and :class:`JobState` (one read of the job's record).

A job's record lives in Redis until ``JOBS["FINISHED_TTL"]`` after it ended (the retention of its
status, result and errors); then, or for an id never enqueued, :class:`JobDoesNotExist`.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from django_jobs.core import payload
from django_jobs.core.cancellation import cancel
from django_jobs.exceptions import ConfigurationError, JobDoesNotExist, PayloadError
from django_jobs.store import CancelResult, JobRecord, Status, Store, read, valid_job_id
from django_jobs.store.lifecycle import ENDED, F, State


@dataclass(frozen=True)
class JobError:
    """One failed attempt: the exception's class path, its message and traceback."""

    attempt: int
    at: str  # ISO 8601, UTC
    exception: str
    message: str
    traceback: str


@dataclass(frozen=True)
class JobState:
    """One job as its record says now. ``result`` is the JSON return value of a finished job whose
    job keeps results (``@job(store_result=True)``; every ``@task``), else None."""

    id: str
    name: str
    queue: str
    status: Status | None  # None: a status this version does not know
    attempts: int
    args: list[Any] | None  # None if the payload cannot be read
    kwargs: dict[str, Any] | None
    result: Any
    errors: tuple[JobError, ...]
    enqueued_at: dt.datetime | None
    started_at: dt.datetime | None  # the first attempt's start
    last_attempted_at: dt.datetime | None
    finished_at: dt.datetime | None
    worker_ids: tuple[str, ...]
    due_at: dt.datetime | None = None  # when a scheduled job (a retry, a delayed job) is due
    cancel_requested_at: dt.datetime | None = None  # when a running job was asked to stop (cancel())
    paused: bool = False  # queued, but waiting for its queue or its job type to be resumed
    snoozes: int = 0  # how often it snoozed (each snooze gave its attempt back)
    expires_at: dt.datetime | None = None  # not started by then, it is dropped unrun
    expired: bool = False  # dropped unrun, status CANCELED: it had not started by expires_at
    limit_key: str | None = None  # the key its job type's limits count it under (@job(limit_key=...))
    parked: bool = False  # queued, waiting for its key's turn (see limit_key)
    state: State | None = None  # its lifecycle state (None: read from a record alone, or nothing holds it)
    where: read.Where | None = field(default=None, repr=False, compare=False)  # what the read model found

    @functools.cached_property
    def why(self) -> str:
        """One plain sentence: what holds the job where it is, and what lifts it (``ops.why``).
        Read when first asked: a ready job's costs a look at the workers serving its queue."""
        if not _explainers:
            raise ConfigurationError("Why a job waits is known once Django is set up with 'django_jobs'.")
        return _explainers[0](self)

    @property
    def finished(self) -> bool:
        return self.status in ENDED

    @property
    def successful(self) -> bool:
        return self.status is Status.FINISHED

    @classmethod
    def from_record(cls, record: JobRecord, where: read.Where | None = None) -> JobState:
        """The job as ``record`` says, and where the read model found it (``where``; None: a record
        alone, as a running attempt sees its own claim)."""
        try:
            _, args, kwargs = payload.loads(record.data)
        except PayloadError:
            args, kwargs = None, None
        state = where.state if where is not None else read.ended(record)
        return cls(
            id=record.id,
            name=record.name,
            queue=record.queue,
            status=record.status,
            attempts=record.attempt,
            args=args,
            kwargs=kwargs,
            result=_result(record),
            errors=tuple(_error(entry) for entry in record.history if isinstance(entry, dict)),
            # when enqueue() ran: RQ's own enqueued_at moves to each retry's return to the queue
            enqueued_at=record.time(F.CREATED_AT) or record.time(F.ENQUEUED_AT),
            started_at=record.time(F.FIRST_STARTED) or record.time(F.STARTED_AT),
            last_attempted_at=record.time(F.STARTED_AT),
            finished_at=record.time(F.ENDED_AT) if record.status in ENDED else None,
            worker_ids=tuple(w for w in record.text(F.WORKERS).split("\n") if w),
            due_at=dt.datetime.fromtimestamp(where.due, dt.UTC) if where and where.due is not None else None,
            cancel_requested_at=record.time(F.CANCEL),
            paused=where is not None and where.paused,
            snoozes=record.snoozes,
            expires_at=record.expires,
            expired=state is State.EXPIRED,
            limit_key=record.text(F.LIMIT_KEY) or None,
            parked=where is not None and where.in_line,
            state=state,
            where=where,
        )


_explainers: list[Callable[[JobState], str]] = []


def explain_through(explainer: Callable[[JobState], str]) -> None:
    """Connect what says why a job is where it is: the app connects ``ops.why.explain`` from above,
    since explaining reads the registry, the workers and the database."""
    _explainers[:] = [explainer]


def _result(record: JobRecord) -> Any:
    raw = record.fields.get(F.RESULT)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:  # garbage in the field: no result rather than a crash of the reader
        return None


def _error(entry: dict[str, Any]) -> JobError:
    return JobError(
        attempt=int(entry.get("attempt") or 0),
        at=str(entry.get("at", "")),
        exception=str(entry.get("exception", "")),
        message=str(entry.get("message", "")),
        traceback=str(entry.get("traceback", "")),
    )


def _stores(queue: str | None) -> Iterator[Store]:
    """The store of ``queue``, or of every place the configured queues live."""
    # django_rq reads settings on import; ``import django_jobs`` must work before settings exist.
    from django_jobs.core.connections import stores

    return stores(queue)


def statuses(queues: Mapping[str, str]) -> dict[str, str | None]:
    """The status field of each job (id -> queue) in its queue's Redis, one round trip per queue:
    None where its hash is gone, "" where the key is not a hash. A job of a queue missing from
    ``RQ_QUEUES`` is left out."""
    from django_jobs.core.connections import queue_configs, store_of

    by_queue: dict[str, list[str]] = {}
    for job_id, queue in queues.items():
        by_queue.setdefault(queue, []).append(job_id)
    found: dict[str, str | None] = {}
    for queue, ids in by_queue.items():
        if queue in queue_configs():
            found.update(store_of(queue).statuses(ids))
    return found


def get_job(job_id: str, *, queue: str | None = None) -> JobState:
    """The job with this id, read now. ``queue`` saves looking on every Redis server.

    Raises :class:`JobDoesNotExist` for an unknown id or one whose retention expired, and
    ``ValueError`` for a string that cannot be a job id."""
    if not isinstance(job_id, str) or not valid_job_id(job_id):
        raise ValueError(f"{job_id!r} is not a job id: letters, digits, _ and -, 1 to 64 of them.")
    for store in _stores(queue):
        where = read.where(store, job_id)
        if where.record.exists:
            return JobState.from_record(where.record, where)
    raise JobDoesNotExist(
        f"No job {job_id} exists: the id is unknown, or the job ended more than "
        "JOBS['FINISHED_TTL'] seconds ago and its record was removed."
    )


@dataclass(frozen=True)
class JobHandle:
    """What enqueue returns: enough to find the job again, from this process or any other."""

    id: str
    name: str
    queue: str

    def state(self) -> JobState:
        """The job as its record says now (one Redis read)."""
        return get_job(self.id, queue=self.queue)

    @property
    def status(self) -> Status | None:
        return self.state().status

    @property
    def result(self) -> Any:
        """The JSON return value, once the job finished (``store_result=True`` jobs only)."""
        return self.state().result

    def cancel(self) -> CancelResult:
        """Cancel the job now (see ``django_jobs.cancel``): only its queue's Redis is asked."""
        return cancel(self.id, queue=self.queue)
