"""The test modes' attempts: a job run in the caller's process, as a worker runs it.

``immediate`` (at commit) and ``capture``'s ``run()`` hand each envelope to :func:`run`, which turns it
into the claim a worker would get and runs it through :func:`execution.run`, the worker's own attempt:
the registry, the retry policy, the soft timeout, ``current_job()``, plain and ``async def`` jobs, the
result as JSON, and the outcome pipeline (dead letters, periodic runs, batches, signals, metrics, the
log line). What a worker's store would write to Redis is kept in memory (:class:`InlineStore`), so
Redis is left untouched; nothing here waits for a retry or a snooze, or runs a job again.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from django_jobs.core import execution
from django_jobs.core.envelope import Envelope
from django_jobs.core.outcomes import Outcome
from django_jobs.store import Claimed, JobRecord, Scope, Settled, Status, split_token
from django_jobs.store.lifecycle import F


class InlineStore:
    """Where the attempts of one delivery settle: each job's status, as its Redis hash would say it.
    A retry or a snooze is scheduled nowhere, and a dead job has no "dying" entry to release."""

    def __init__(self) -> None:
        self._statuses: dict[str, str] = {}

    def fail(
        self,
        token: str,
        queue: str,
        *,
        delay: float | None,
        fields: dict[str, Any],
        finished_ttl: int,
        lost: bool = False,
        cancel: bool = False,
        scope: Scope | None = None,
    ) -> Settled:
        status = Status.CANCELED if cancel else Status.FAILED if delay is None else Status.SCHEDULED
        self._statuses[split_token(token)] = status.value
        return Settled.CANCELLED if cancel else Settled.DONE

    def snooze(
        self, token: str, queue: str, seconds: float, finished_ttl: int, scope: Scope | None = None
    ) -> Settled:
        self._statuses[split_token(token)] = Status.SCHEDULED.value
        return Settled.DONE

    def buried(self, job_id: str, ttl: int) -> None:
        """The dead letter is written; the job keeps its "failed" status, as its hash does."""

    def statuses(self, job_ids: Sequence[str]) -> dict[str, str | None]:
        return {job_id: self._statuses.get(job_id) for job_id in job_ids}


def claimed(envelope: Envelope, worker: str, attempt: int = 1) -> Claimed:
    """The claim a worker would get for ``envelope``: the job's hash as pushed, with this attempt
    counted, held by ``worker``; attempt 0 and no lease: a job dropped unrun because it expired."""
    fields = {name: str(value).encode() for name, value in envelope.fields().items()}
    fields[F.ATTEMPT] = str(attempt).encode()
    token = f"{envelope.id}:{worker}" if attempt else ""
    return Claimed(envelope.queue, envelope.id, token, JobRecord(envelope.id, fields), worker)


def run(envelope: Envelope, worker: str, caller: Collection[str]) -> None:
    """Run one attempt of ``envelope`` now, its end published as a worker's is, then raise what the
    job raised (or the ``Snooze`` it returned; for a job that cannot run, ``JobNotFound``, and for a
    result that is not JSON, ``ResultError``): a test sees it. ``caller``: the connections inside the
    caller's transaction (``execution.caller_transactions()``), which stay open."""
    ended = execution.run(InlineStore(), claimed(envelope, worker), caller=caller)
    if ended.outcome is not Outcome.SUCCESS and ended.exception is not None:
        raise ended.exception


def expired(envelope: Envelope) -> None:
    """Publish the end of a job dropped unrun because its expiry passed, as a worker's claim does."""
    execution.publish_expired(InlineStore(), [claimed(envelope, "", attempt=0)])
