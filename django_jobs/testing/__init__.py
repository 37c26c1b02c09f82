"""Helpers for your own tests: capture enqueued jobs, run them inline, or drain Redis in-process.

``JOBS["MODE"] = "capture"`` records jobs instead of queueing them; ``"immediate"`` runs them
inline (at commit inside a transaction). Both treat Django ``TestCase``'s wrapping transaction as no
transaction, so they work there unchanged, and an ``atomic()`` block of the code under test as the
transaction it is in production. Immediate mode, ``Captured.run()`` and :func:`run_jobs` run each
attempt as the worker does, its outcome published through the same pipeline; the first two then
raise what the job raised to the test. :func:`verify_idempotent` proves a job may be delivered twice,
:func:`verify_crash_safe` that it may die anywhere and be retried.

The names are imported on first use: pytest imports this package for its plugin
(``django_jobs.testing.pytest_plugin``) before Django's settings are set up.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_jobs.client.backends.capture import Captured, CapturedJob
    from django_jobs.testing.effects import effect
    from django_jobs.testing.modes import capture_jobs, immediate_jobs, run_jobs
    from django_jobs.testing.safety import NotCrashSafe, verify_crash_safe
    from django_jobs.testing.verify import NotIdempotent, verify_idempotent

__all__ = [
    "Captured",
    "CapturedJob",
    "NotCrashSafe",
    "NotIdempotent",
    "capture_jobs",
    "effect",
    "immediate_jobs",
    "run_jobs",
    "verify_crash_safe",
    "verify_idempotent",
]
#: Where each name lives, if not in ``modes``.
_HOMES = {
    "effect": "effects",
    "NotIdempotent": "verify",
    "verify_idempotent": "verify",
    "NotCrashSafe": "safety",
    "verify_crash_safe": "safety",
}


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module(f"django_jobs.testing.{_HOMES.get(name, 'modes')}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
