"""The one settings object over ``settings.JOBS``, read at access time so ``override_settings`` works."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from .policy import RetryPolicy

#: Every key of ``settings.JOBS`` with its default. The README documents each one.
DEFAULTS: dict[str, Any] = {
    # "queue": push to Redis; "immediate": run inline (at commit inside a transaction);
    # "capture": record jobs for assertions in tests.
    "MODE": "queue",
    # Used by every @job that does not pass retry=.
    "DEFAULT_RETRY": {"max_attempts": 5, "base": 30.0, "factor": 2.0, "max_delay": 3600.0},
    # Encoded payloads larger than this raise PayloadError at enqueue.
    "MAX_PAYLOAD_BYTES": 64 * 1024,
    # Dotted paths of callables alert(dead_letter) run after a job is dead-lettered.
    "ALERT_HOOKS": ["django_jobs.alerts.log_and_mail_admins"],
    # Seconds after an alert during which dead letters of the same kind are only counted; the count
    # goes out in one summary when the window closes.
    "ALERT_WINDOW": 300,
    # Seconds a running job's lease lives without a heartbeat before another runjobs takes it back.
    "LEASE_SECONDS": 10,
    # Seconds between a job's soft timeout (exception in the job) and the hard kill of its process.
    "TIMEOUT_GRACE": 5,
    # Seconds runjobs waits for the running jobs to finish after SIGTERM before handing them back.
    "SHUTDOWN_GRACE": 25,
    # Seconds an idempotency key is kept; must outlive the longest retry window.
    "IDEMPOTENCY_RETENTION": 30 * 24 * 3600,
    # Seconds a finished job's hash stays in Redis; a duplicate push of its id inside this window is a no-op.
    "FINISHED_TTL": 3600,
    # Socket timeouts (seconds) for the web side's Redis connections, so a frozen Redis cannot hang requests.
    "REDIS_SOCKET_TIMEOUT": 2.0,
    # Seconds between the worker's maintenance passes (promote due jobs, reap leases, relay the outbox).
    "MAINTENANCE_INTERVAL": 0.25,
    # Periodic jobs: {job name: cron expression (schedule or reschedule it) or None (disable it)}.
    "CRON": {},
    # "text" or "json": the format of the one log line per job outcome.
    "LOG_FORMAT": "text",
    # Jobs per second a bulk dead-letter requeue releases: later jobs wait in the scheduled set.
    "REQUEUE_RATE": 20,
    # redact(data, *, job_name) -> data (or its dotted path), applied to payloads before the admin or
    # the deadletters command shows them.
    "REDACT": "django_jobs.redaction.mask_secrets",
    # Modules that define jobs outside an installed app's jobs.py, imported at start-up with the
    # jobs modules, so runjobs knows every job the web process can enqueue.
    "IMPORT_MODULES": [],
    # runjobs refuses to start on a Redis that evicts keys when full (maxmemory-policy other than
    # noeviction, with maxmemory set): evicted jobs vanish. True starts it anyway, with a warning.
    "ALLOW_EVICTION": False,
}


class JobsSettings:
    """Typed access to ``settings.JOBS``; every read goes back to Django's settings."""

    @staticmethod
    def get(name: str) -> Any:
        jobs = getattr(settings, "JOBS", None) or {}
        return jobs.get(name, DEFAULTS[name]) if isinstance(jobs, dict) else DEFAULTS[name]

    @property
    def MODE(self) -> str:
        return str(self.get("MODE"))

    @property
    def DEFAULT_RETRY(self) -> dict[str, Any]:
        return dict(self.get("DEFAULT_RETRY"))

    def default_retry(self) -> RetryPolicy:
        """The policy of every job that passes no ``retry=``; raises ValueError or TypeError if malformed."""
        from .policy import RetryPolicy

        return RetryPolicy(**self.DEFAULT_RETRY)

    @property
    def MAX_PAYLOAD_BYTES(self) -> int:
        return int(self.get("MAX_PAYLOAD_BYTES"))

    @property
    def ALERT_HOOKS(self) -> list[str]:
        return list(self.get("ALERT_HOOKS"))

    @property
    def ALERT_WINDOW(self) -> float:
        return float(self.get("ALERT_WINDOW"))

    @property
    def LEASE_SECONDS(self) -> float:
        return float(self.get("LEASE_SECONDS"))

    @property
    def TIMEOUT_GRACE(self) -> float:
        return float(self.get("TIMEOUT_GRACE"))

    @property
    def SHUTDOWN_GRACE(self) -> float:
        return float(self.get("SHUTDOWN_GRACE"))

    @property
    def IDEMPOTENCY_RETENTION(self) -> float:
        return float(self.get("IDEMPOTENCY_RETENTION"))

    @property
    def FINISHED_TTL(self) -> int:
        return int(self.get("FINISHED_TTL"))

    @property
    def REDIS_SOCKET_TIMEOUT(self) -> float:
        return float(self.get("REDIS_SOCKET_TIMEOUT"))

    @property
    def MAINTENANCE_INTERVAL(self) -> float:
        return float(self.get("MAINTENANCE_INTERVAL"))

    @property
    def CRON(self) -> dict[str, str | None]:
        return dict(self.get("CRON"))

    @property
    def LOG_FORMAT(self) -> str:
        return str(self.get("LOG_FORMAT"))

    @property
    def REQUEUE_RATE(self) -> float:
        return float(self.get("REQUEUE_RATE"))

    @property
    def REDACT(self) -> str | Callable[..., Any]:
        hook: str | Callable[..., Any] = self.get("REDACT")
        return hook

    @property
    def IMPORT_MODULES(self) -> list[str]:
        modules = self.get("IMPORT_MODULES")
        if not isinstance(modules, list | tuple) or not all(isinstance(m, str) for m in modules):
            # Read at start-up, before any system check could report it: say what is wrong right here.
            raise ImproperlyConfigured(
                f"JOBS['IMPORT_MODULES'] must be a list of module paths, got {modules!r}."
            )
        return list(modules)

    @property
    def ALLOW_EVICTION(self) -> bool:
        return bool(self.get("ALLOW_EVICTION"))

    @staticmethod
    def unknown_keys() -> list[tuple[str, str | None]]:
        """Keys of ``settings.JOBS`` that mean nothing, each with the closest real key."""
        given = getattr(settings, "JOBS", None) or {}
        if not isinstance(given, dict):
            return []
        return [
            (key, next(iter(difflib.get_close_matches(str(key), DEFAULTS, n=1)), None))
            for key in given
            if key not in DEFAULTS
        ]


jobs_settings = JobsSettings()
