"""One exception tree, so callers can catch everything django_jobs raises with ``JobsError``."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ImproperlyConfigured

#: The longest a job may snooze at once: 30 days. A longer wait is a bug (a timestamp read as seconds).
MAX_SNOOZE_SECONDS = 30 * 24 * 3600.0


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


class ForeignWorker(JobsError):
    """A foreign worker (an rqworker on a django_jobs queue) took the job and failed it, unrun: what
    its dead letter records."""


class JobTimeout(JobsError):
    """The job ran past its timeout."""


class JobCancelled(JobsError):
    """The job was cancelled. Raise it from a job once ``cancel_requested()`` is True: the attempt ends
    cancelled, never retried and never dead-lettered."""


class Snooze(JobsError):
    """Raise (or return) from a job to run it again after ``seconds`` (a number or a timedelta, from
    0 to 30 days) without spending an attempt, e.g. when a partner answers 429 with Retry-After.

    Not a failure: no retry is counted and nothing is dead-lettered, until the job has snoozed more
    often than its ``max_snoozes`` (``JOBS["MAX_SNOOZES"]``). A bad ``seconds`` raises ``ValueError``
    where the job builds it: that attempt fails like any other.
    """

    def __init__(self, seconds: float | dt.timedelta) -> None:
        value = seconds.total_seconds() if isinstance(seconds, dt.timedelta) else seconds
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 <= value <= MAX_SNOOZE_SECONDS  # NaN fails this too
        ):
            raise ValueError(
                f"Snooze() takes a number of seconds or a timedelta from 0 to {MAX_SNOOZE_SECONDS:g} "
                f"(30 days), got {seconds!r}."
            )
        self._seconds = float(value)
        super().__init__(f"Snoozed for {self._seconds:g} s.")

    @property
    def seconds(self) -> float:
        """How long the job waits before it runs again."""
        return self._seconds

    def __reduce__(self) -> tuple[type[Snooze], tuple[float]]:
        # Built again from its seconds, not its message (a test runner's processes pickle exceptions).
        return type(self), (self._seconds,)


class SnoozedTooOften(PermanentError):
    """The job snoozed more often than its ``max_snoozes`` allows: dead-lettered with reason "snoozed"."""


class ConfigurationError(JobsError, ImproperlyConfigured):
    """django_jobs is misconfigured; ``manage.py check`` says how."""


class ResultError(PermanentError, TypeError):
    """The job returned a value that cannot be stored as JSON: return IDs and plain values."""


class TransactionLeftOpen(PermanentError):
    """The job returned inside a transaction it never ended (an ``atomic()`` block left open, or
    autocommit turned off): its uncommitted writes were rolled back, so its work did not happen."""


class JobDoesNotExist(JobsError, LookupError):
    """No job has this id, or its record outlived ``JOBS["FINISHED_TTL"]`` and was removed."""
