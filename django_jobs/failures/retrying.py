"""Retry a job now, from the admin's job page or from code: :func:`retry_now`.

A job waiting in the scheduled set (a retry waiting out its backoff, a delayed job) moves onto its
queue at once. A dead-lettered job is requeued from its open dead letter, as a new job with fresh
attempts (the dead-letter requeue, audited the same way). Anything else is left as it is.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser

from django_jobs.core import results
from django_jobs.core.connections import store_of
from django_jobs.exceptions import JobDoesNotExist
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import Status


class RetryOutcome(enum.StrEnum):
    STARTED = "started"  # it was scheduled; it is on its queue now
    REQUEUED = "requeued"  # it was dead-lettered; its dead letter was requeued as ``job_id``
    NOT_WAITING = "not_waiting"  # queued, running, finished or cancelled: nothing to retry
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Retried:
    outcome: RetryOutcome
    job_id: str  # the job that will run: the same one, or the requeued dead letter's new job


def retry_now(job_id: str, *, actor: AbstractBaseUser | AnonymousUser | None = None) -> Retried:
    """Run ``job_id`` again as soon as a worker is free; ``actor`` is recorded for a requeue."""
    try:
        state = results.get_job(job_id)
    except JobDoesNotExist:
        state = None
    if state is not None and state.status is Status.SCHEDULED:
        moved = store_of(state.queue).run_now(job_id, state.queue)
        return Retried(RetryOutcome.STARTED if moved == 1 else RetryOutcome.NOT_WAITING, job_id)
    entry = DeadLetter.objects.filter(job_id=job_id, status=DeadLetter.Status.OPEN).first()
    if entry is not None:
        requeued = deadletter.requeue([entry], actor=actor).entries
        if requeued:
            return Retried(RetryOutcome.REQUEUED, requeued[0].requeued_job_id or "")
    return Retried(RetryOutcome.NOT_FOUND if state is None else RetryOutcome.NOT_WAITING, job_id)
