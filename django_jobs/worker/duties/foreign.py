"""Foreign workers: an ``rqworker`` left serving a django_jobs queue (a migration from django-rq, an
old deployment) pops django_jobs jobs, cannot decode them, and fails them into RQ's failed registry,
where nothing of django_jobs looks. This duty moves each such job, of any queue of its Redis server,
into the dead letters (reason "foreign worker", with RQ's error), its payload restored so it can be
requeued, and warns, once per worker, of every foreign worker registered on one of those queues."""

from __future__ import annotations

import logging

from django_jobs.core import payload
from django_jobs.core.connections import queues_on
from django_jobs.exceptions import ForeignWorker, PayloadError
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import JobRecord
from django_jobs.store.read import foreign_workers
from django_jobs.worker.duties.base import Duty, Scope

logger = logging.getLogger("django_jobs.worker")

#: Members of RQ's failed registry read per queue and pass.
PAGE = 100
#: What the dead letter says failed: nothing of the job's code ran.
EXCEPTION = f"{ForeignWorker.__module__}.{ForeignWorker.__qualname__}"


class ForeignFailures(Duty):
    name = "reclaim_foreign_failures"
    every = 5.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.warned: set[str] = set()
        self.offset: dict[str, int] = {}  # per queue, where the next pass reads RQ's registry from

    def run(self) -> None:
        store = self.scope.store
        queues = queues_on(self.scope.queues[0])  # every queue of this server: whoever serves them
        for worker in foreign_workers(store.connection, queues):
            if worker.name not in self.warned:
                self.warned.add(worker.name)
                logger.warning(
                    "A foreign worker, %s (pid %s on %s), serves queue(s) %s: it fails the django_jobs jobs "
                    "it takes (runjobs dead-letters them). Stop it.",
                    worker.name, worker.pid, worker.hostname, ", ".join(worker.queues),
                )  # fmt: skip
        for queue in queues:
            self._pass(queue)

    def _pass(self, queue: str) -> None:
        """One page of RQ's failed registry of ``queue``. RQ's own failures stay there, so the page
        after them is read next time, and the scan starts over once it reaches the end: no job of ours
        waits behind them for ever. One job that cannot be handled is logged and passed over."""
        store, start = self.scope.store, self.offset.get(queue, 0)
        found = store.foreign_failures(queue, start=start, limit=PAGE)
        kept = 0
        for job_id in found:
            try:
                kept += not self._reclaim(queue, store.record(job_id))
            except Exception:
                logger.exception("Job %s of RQ's failed registry of %s could not be handled.", job_id, queue)
                kept += 1
        self.offset[queue] = start + kept if len(found) == PAGE else 0

    def _reclaim(self, queue: str, record: JobRecord) -> bool:
        """Into dying (if it is a django_jobs job still there), then its dead letter at once; False
        for one left in RQ's registry."""
        store = self.scope.store
        error = store.foreign_error(record.id)
        message = (
            f"A foreign worker ({record.worker or 'an rqworker'}) took the job from queue {queue!r} and "
            f"failed it; nothing of its code ran. {_last_line(error)}"
        ).strip()
        reason = DeadLetter.Reason.FOREIGN.value
        restored_data = _restored(record.data)
        if not store.reclaim(
            queue, record.id, data=restored_data, reason=reason, exception=EXCEPTION, message=message
        ):
            return False  # RQ's own job, or another runjobs took it first
        restored = store.record(record.id)
        failure = deadletter.Failure(
            record.id, queue, DeadLetter.Reason.FOREIGN, EXCEPTION, message, error, restored.history
        )
        deadletter.bury(store, failure, restored.snapshot)
        logger.warning("Job %s (%s) was failed by a foreign worker: dead-lettered.", record.id, record.name)
        return True


def _restored(data: bytes) -> bytes:
    """The payload as django_jobs wrote it: RQ saves a job's data back zlib-compressed (inflated within
    ``MAX_PAYLOAD_BYTES``; data that is not, or that inflates past it, stays as it is)."""
    if data[:1] == b"[":
        return data
    try:
        return payload.inflate(data)
    except PayloadError:
        return data


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return f"RQ says: {lines[-1].strip()[:500]}" if lines else ""
