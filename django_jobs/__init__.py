"""Background jobs for Django on RQ and Redis that survive retries, crashes and duplicate delivery."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .context import JobContext
from .context import current as current_job
from .envelope import JobHandle
from .exceptions import JobCancelled, JobsError, PayloadError, PermanentError
from .idempotency import claim, claim_key, idempotent
from .policy import RetryPolicy
from .registry import job
from .store import CancelResult

if TYPE_CHECKING:
    from .cancellation import cancel, cancel_requested
    from .chains import Page, chain

__all__ = [
    "CancelResult",
    "JobCancelled",
    "JobContext",
    "JobHandle",
    "JobsError",
    "Page",
    "PayloadError",
    "PermanentError",
    "RetryPolicy",
    "cancel",
    "cancel_requested",
    "chain",
    "claim",
    "claim_key",
    "current_job",
    "idempotent",
    "job",
]

#: Public names whose modules need the app registry ready (they use models) or Django's settings (they
#: reach Redis through RQ_QUEUES): imported on first use.
_AFTER_SETUP = {
    "chain": "chains",
    "Page": "chains",
    "cancel": "cancellation",
    "cancel_requested": "cancellation",
}


def __getattr__(name: str) -> Any:
    if name in _AFTER_SETUP:
        return getattr(import_module(f".{_AFTER_SETUP[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
