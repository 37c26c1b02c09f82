"""One exception tree, so callers can catch everything django_jobs raises with ``JobsError``."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class JobsError(Exception):
    """A django_jobs operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class PayloadError(JobsError, TypeError):
    """The job's arguments cannot travel as JSON: pass IDs and plain values, not objects."""


class PayloadTooLarge(PayloadError):
    """The job's data inflates past ``JOBS["MAX_PAYLOAD_BYTES"]``: it was not decoded."""


class LimitKeyError(JobsError, ValueError):
    """A job's ``limit_key`` gave no usable key for these arguments: it raised, or returned something
    other than a short string or an int."""


class PermanentError(JobsError):
    """Raise from a job to skip the remaining retries and dead-letter it at once."""


class JobNotFound(JobsError):
    """No job is registered under this name."""


class TransactionAmbiguous(JobsError):
    """Several databases are inside a transaction; pass ``using=`` so the job waits for the right commit."""


class WorkerLost(JobsError):
    """The process running the job died before the job finished."""


class JobTimeout(JobsError):
    """The job ran past its timeout."""


class JobCancelled(JobsError):
    """The job was cancelled. Raise it from a job once ``cancel_requested()`` is True: the attempt ends
    cancelled, never retried and never dead-lettered."""


class ConfigurationError(JobsError, ImproperlyConfigured):
    """django_jobs is misconfigured; ``manage.py check`` says how."""


class ResultError(PermanentError, TypeError):
    """The job returned a value that cannot be stored as JSON: return IDs and plain values."""


class JobDoesNotExist(JobsError, LookupError):
    """No job has this id, or its record outlived ``JOBS["FINISHED_TTL"]`` and was removed."""
