"""Retry policy: exponential backoff with full jitter, and the retry-or-dead decision."""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass

from django_jobs.exceptions import PayloadError, PermanentError


@dataclass(frozen=True)
class RetryPolicy:
    """How often a failing job is tried, and how long it waits in between.

    The wait before attempt ``n + 1`` is drawn uniformly from
    ``[0, min(max_delay, base * factor ** (n - 1))]`` ("full jitter"), so a
    burst of failures does not come back as a burst of retries.
    """

    max_attempts: int = 5
    base: float = 30.0
    factor: float = 2.0
    max_delay: float = 3600.0

    def __post_init__(self) -> None:
        problems = []
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            problems.append(f"max_attempts must be an int, got {self.max_attempts!r}")
        elif self.max_attempts < 1:
            problems.append(f"max_attempts must be at least 1, got {self.max_attempts}")
        for field in ("base", "factor", "max_delay"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                problems.append(f"{field} must be a finite number, got {value!r}")
            elif value < (1 if field == "factor" else 0):
                problems.append(f"{field} must be >= {1 if field == 'factor' else 0}, got {value}")
        if problems:
            raise ValueError("Bad RetryPolicy: " + "; ".join(problems))

    def ceiling(self, attempt: int) -> float:
        """The longest wait after failed attempt number ``attempt`` (1-based)."""
        if self.base == 0 or self.factor == 1:  # no growth: nothing can overflow
            return min(self.max_delay, self.base)
        try:
            return min(self.max_delay, self.base * float(self.factor) ** max(attempt - 1, 0))
        except OverflowError:
            return self.max_delay

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """A full-jitter wait, in seconds, after failed attempt number ``attempt``."""
        return (rng or random).uniform(0, self.ceiling(attempt))


class Verdict(enum.Enum):
    """What happens to a job after a failed attempt."""

    RETRY = "retry"
    DEAD = "dead"


def classify(
    exc: BaseException, *, attempt: int, policy: RetryPolicy, permanent: tuple[type[BaseException], ...]
) -> Verdict:
    """Permanent errors and exhausted attempts are dead; everything else is retried."""
    if isinstance(exc, PermanentError | PayloadError) or (permanent and isinstance(exc, permanent)):
        return Verdict.DEAD
    return Verdict.RETRY if attempt < policy.max_attempts else Verdict.DEAD
