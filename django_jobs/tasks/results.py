"""A job's record as the framework's ``TaskResult``: the one mapping ``get_result()``, the running
attempt's ``TaskContext`` and the worker's signals all use.

| django_jobs status                    | TaskResultStatus |
|---------------------------------------|------------------|
| queued, scheduled (delayed, retrying) | READY (a retrying task has its errors so far) |
| started                               | RUNNING          |
| finished                              | SUCCESSFUL       |
| failed (dead-lettered), canceled      | FAILED (see below) |

A task cancelled while it ran has an error saying how it stopped (``JobCancelled``, or the kill); one
cancelled while it waited has none for the cancel.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

from django_jobs.core.results import JobState
from django_jobs.store import Claimed, JobRecord, Status
from django_jobs.store.lifecycle import F
from django_jobs.tasks.framework import Framework

STATUSES = {
    Status.QUEUED: "READY",
    Status.SCHEDULED: "READY",
    Status.STARTED: "RUNNING",
    Status.FINISHED: "SUCCESSFUL",
    Status.FAILED: "FAILED",
    Status.CANCELED: "FAILED",
}

#: Stands for the worker of an attempt whose name the record no longer keeps (the oldest are dropped).
UNKNOWN_WORKER = "(unknown)"


def task_result(framework: Framework, task: Any, state: JobState, backend: str) -> Any:
    """``state`` as ``framework``'s TaskResult of ``task``, read through ``backend``."""
    status = framework.Status[STATUSES.get(state.status, "READY") if state.status else "READY"]
    result = framework.TaskResult(
        task=task,
        id=state.id,
        status=status,
        enqueued_at=state.enqueued_at,
        started_at=state.started_at,
        finished_at=_finished_at(state),
        last_attempted_at=state.last_attempted_at,
        args=state.args or [],
        kwargs=state.kwargs or {},
        backend=backend,
        errors=_errors(framework, state),
        worker_ids=worker_ids(state),
    )
    if status == framework.Status.SUCCESSFUL:
        object.__setattr__(result, "_return_value", state.result)  # as the frameworks' own backends do
    return result


def _errors(framework: Framework, state: JobState) -> list[Any]:
    error = framework.TaskError
    return [error(exception_class_path=e.exception, traceback=e.traceback) for e in state.errors]


def worker_ids(state: JobState) -> list[str]:
    """One worker per attempt, the latest last: the frameworks count attempts as ``len(worker_ids)``."""
    known = list(state.worker_ids[-state.attempts :]) if state.attempts else []
    return [UNKNOWN_WORKER] * (state.attempts - len(known)) + known


def _finished_at(state: JobState) -> dt.datetime | None:
    if not state.finished:
        return None
    if state.finished_at is not None:
        return state.finished_at
    last_error = state.errors[-1].at if state.errors else ""
    try:  # a dead-lettered job's end is its last failure
        return dt.datetime.fromisoformat(last_error)
    except ValueError:
        return state.last_attempted_at


def attempt_state(
    claimed: Claimed, started: dt.datetime, history: Sequence[dict[str, Any]] | None = None
) -> JobState:
    """The job as its running attempt sees it, without reading Redis again: the claimed record plus
    what the claim wrote (the attempt's start and worker), and ``history`` if the attempt failed."""
    record = claimed.record
    if history is not None:
        record = JobRecord(record.id, {**record.fields, F.HISTORY: json.dumps(list(history)).encode()})
    state = JobState.from_record(record)
    if not claimed.worker:  # read back after the claim: the record already says all this
        return dataclasses.replace(state, status=Status.STARTED)
    return dataclasses.replace(
        state,
        status=Status.STARTED,
        started_at=state.started_at or started,
        last_attempted_at=started,
        worker_ids=(*state.worker_ids, claimed.worker),
    )
