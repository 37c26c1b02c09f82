"""Background jobs for Django on RQ and Redis that survive retries, crashes and duplicate delivery."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from django_jobs.core.cancellation import cancel, cancel_requested
from django_jobs.core.context import JobContext
from django_jobs.core.context import current as current_job
from django_jobs.core.registry import job
from django_jobs.core.results import JobError, JobHandle, JobState, get_job
from django_jobs.exceptions import (
    JobCancelled,
    JobDoesNotExist,
    JobsError,
    LimitKeyError,
    PayloadError,
    PermanentError,
    ResultError,
    Snooze,
    SnoozedTooOften,
)
from django_jobs.flow.idempotency import claim, claim_key, idempotent
from django_jobs.policy import RetryPolicy
from django_jobs.store import CancelResult

if TYPE_CHECKING:
    from django_jobs.failures.retrying import retry_now
    from django_jobs.flow.pausing import pause, paused, resume
    from django_jobs.ops.why import why
    from django_jobs.workflows.batches import batch, batch_callback
    from django_jobs.workflows.chains import Page, chain

__all__ = [
    "CancelResult",
    "JobCancelled",
    "JobContext",
    "JobDoesNotExist",
    "JobError",
    "JobHandle",
    "JobState",
    "JobsError",
    "LimitKeyError",
    "Page",
    "PayloadError",
    "PermanentError",
    "ResultError",
    "RetryPolicy",
    "Snooze",
    "SnoozedTooOften",
    "batch",
    "batch_callback",
    "cancel",
    "cancel_requested",
    "chain",
    "claim",
    "claim_key",
    "current_job",
    "get_job",
    "idempotent",
    "job",
    "pause",
    "paused",
    "resume",
    "retry_now",
    "why",
]

#: Public names whose modules need the app registry ready (they use models) or settings (django_rq
#: reads them on import): imported on first use.
_AFTER_SETUP = {
    "chain": "django_jobs.workflows.chains",
    "Page": "django_jobs.workflows.chains",
    "retry_now": "django_jobs.failures.retrying",
    "pause": "django_jobs.flow.pausing",
    "resume": "django_jobs.flow.pausing",
    "paused": "django_jobs.flow.pausing",
    "batch": "django_jobs.workflows.batches",
    "batch_callback": "django_jobs.workflows.batches",
    "why": "django_jobs.ops.why",
}


def __getattr__(name: str) -> Any:
    if name in _AFTER_SETUP:
        return getattr(import_module(_AFTER_SETUP[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
