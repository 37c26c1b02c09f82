"""``benchmarks/run --only verify``: what the verifiers of ``django_jobs.testing`` cost, on a job of 50
statements (48 reads, then an idempotency key and a write in one transaction).

Each figure is the median of ``ROUNDS`` calls, against the same job delivered plainly (one attempt
through the worker's own code, in process): ``verify_idempotent`` is two deliveries and the
recording; ``verify_crash_safe`` is two clean runs, then a crash and a retry per crash point tried
(``JOBS["VERIFY_CRASH_POINTS"]``, 30), each from the database put back as it was.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

ROUNDS = 7


def measure(bench: Any) -> dict[str, Any]:
    from django.core import mail
    from django.test import override_settings

    from django_jobs.client.backends import inline
    from django_jobs.core import execution
    from django_jobs.testing import verify_crash_safe, verify_idempotent
    from django_jobs.testing.effects import envelope

    from .benchapp.jobs import verify_subject
    from .benchapp.models import Write

    keys = iter(range(10**6))

    def plain() -> None:
        job = envelope(verify_subject, [f"p{next(keys)}"], {})
        execution.run(inline.InlineStore(), inline.claimed(job, "bench"))

    with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"):
        mail.outbox = []
        found = {
            "plain_ms": _median(plain),
            "idempotent_ms": _median(lambda: verify_idempotent(verify_subject, f"i{next(keys)}")),
            "crash_safe_ms": _median(lambda: verify_crash_safe(verify_subject, f"c{next(keys)}")),
        }
    Write.objects.all().delete()
    return found


def _median(call: Callable[[], None]) -> float:
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def render(found: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows of the results table."""
    plain = found["plain_ms"]
    return [
        ("A 50-statement job delivered once, in process (median of 7)", f"{plain:.1f} ms"),
        (
            "verify_idempotent on it: time / against two plain deliveries",
            f"{found['idempotent_ms']:.1f} ms / {found['idempotent_ms'] / (2 * plain):.2f}x",
        ),
        (
            "verify_crash_safe on it (30 crash points tried): time / plain deliveries' worth",
            f"{found['crash_safe_ms']:.0f} ms / {found['crash_safe_ms'] / plain:.0f}",
        ),
    ]
