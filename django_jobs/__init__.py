"""Background jobs for Django on RQ and Redis that survive retries, crashes and duplicate delivery."""

from __future__ import annotations

from .exceptions import JobsError, PayloadError, PermanentError
from .idempotency import claim, idempotent
from .policy import RetryPolicy
from .registry import job

__all__ = ["JobsError", "PayloadError", "PermanentError", "RetryPolicy", "claim", "idempotent", "job"]
