"""Background jobs for Django on RQ and Redis that survive retries, crashes and duplicate delivery."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .context import JobContext
from .context import current as current_job
from .envelope import JobHandle
from .exceptions import JobsError, PayloadError, PermanentError
from .idempotency import claim, claim_key, idempotent
from .policy import RetryPolicy
from .registry import job

if TYPE_CHECKING:
    from .chains import Page, chain

__all__ = [
    "JobContext",
    "JobHandle",
    "JobsError",
    "Page",
    "PayloadError",
    "PermanentError",
    "RetryPolicy",
    "chain",
    "claim",
    "claim_key",
    "current_job",
    "idempotent",
    "job",
]

#: Public names whose modules need the app registry ready (they use models): imported on first use.
_AFTER_SETUP = {"chain": "chains", "Page": "chains"}


def __getattr__(name: str) -> Any:
    if name in _AFTER_SETUP:
        return getattr(import_module(f".{_AFTER_SETUP[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
