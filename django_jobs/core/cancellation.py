"""Cancelling a job: :func:`cancel` from anywhere, :func:`cancel_requested` inside the job itself.

A job that waits (queued, scheduled, deferred by a limit) is cancelled at once, atomically, by one
store script, and its outbox row (a "ledger" job's, or one not pruned yet) is deleted before
``cancel`` returns: it never runs, even if Redis then loses the cancel (a failover, a restart
without its data), since nothing is left that the relay or the ledger sweep would push again.
A running job cannot be stopped from outside without killing its process, so it is asked to: its
code may poll :func:`cancel_requested` and raise ``JobCancelled``, and its supervisor kills it once
it has ignored the request for ``JOBS["CANCEL_GRACE"]`` seconds.
Either way the attempt ends with the outcome ``cancelled``: never retried, never dead-lettered.
A job cancelled while waiting gets its history row at once; a running one's comes with its attempt's end.
"""

from __future__ import annotations

import logging

from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core.context import current
from django_jobs.store import CancelResult, valid_job_id
from django_jobs.store.lifecycle import State
from django_jobs.telemetry import history

#: Who may cancel a job, in the admin and with ``jobs_cancel``.
PERMISSION = "django_jobs.cancel_job"

logger = logging.getLogger("django_jobs")


def cancel(job_id: str, *, queue: str | None = None) -> CancelResult:
    """Cancel the job ``job_id``: ``CANCELLED`` if it was waiting, ``REQUESTED`` if it is running,
    ``ALREADY_ENDED`` (nothing changed) if it finished, failed, was dead-lettered or cancelled,
    ``NOT_FOUND`` if Redis holds no such job.

    Immediate, not deferred to a transaction's commit: inside ``atomic()`` it acts at once, and a
    rollback does not undo it. A job enqueued in a transaction that has not committed yet is not in
    Redis yet: ``NOT_FOUND``. ``queue``: the job's queue if known (a ``JobHandle`` knows it), so only
    its Redis is asked; otherwise each Redis server of ``RQ_QUEUES`` is, until one holds the job.
    ``CANCELLED`` is returned once the job's outbox rows are deleted too; if the database fails
    then, its error is raised: Redis has cancelled the job, but the cancel is not final until the
    ledger's sweep finds it so and deletes the row.
    Raises ``ValueError`` for an id that breaks the id rule, ``RedisError`` if Redis does not answer.
    """
    # django_rq reads settings on import, and models need the app registry; ``import django_jobs``
    # must work before settings exist.
    from django_jobs.core.connections import stores
    from django_jobs.models import forget_ended

    if not isinstance(job_id, str) or not valid_job_id(job_id):
        raise ValueError(
            f"Job id {str(job_id)[:100]!r} is not valid: letters, digits, _ and -, 1 to 64 of them."
        )
    for store in stores(queue):
        result = store.cancel(job_id, jobs_settings.FINISHED_TTL)
        if result is CancelResult.CANCELLED:
            forget_ended([job_id])
            if history.enabled():
                history.keep(history.row(store.record(job_id), State.CANCELLED))
                history.flush(every=0)
        if result is not CancelResult.NOT_FOUND:
            return result
    return CancelResult.NOT_FOUND


def cancel_requested() -> bool:
    """Inside a job: whether its cancel was requested. Poll it between units of work (each call is
    one Redis round trip) and raise ``JobCancelled`` to stop. False outside a job, and when Redis
    does not answer (the job carries on; its supervisor still kills it if it is cancelled)."""
    from django_jobs.core.connections import store_of

    attempt = current()
    if attempt is None:
        return False
    try:
        return store_of(attempt.queue).cancel_requested(attempt.job_id)
    except RedisError as exc:
        logger.debug("Could not read the cancel request of job %s: %s", attempt.job_id, exc)
        return False
