"""The attempt running now, for the job's own code: which job, which attempt.

``execution`` sets it around the job's code; a job (or a library it calls) reads it with
:func:`current`. A ``ContextVar``, so an ``async def`` job's tasks see it too.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class JobContext:
    """One attempt of one job, as its code sees it."""

    job_id: str
    name: str
    queue: str
    attempt: int  # 1-based: the first run is attempt 1


_current: ContextVar[JobContext | None] = ContextVar("django_jobs_current_attempt", default=None)


def current() -> JobContext | None:
    """The attempt running in this context, or None outside a job."""
    return _current.get()


def running(attempt: JobContext) -> contextlib.AbstractContextManager[None]:
    return binding(_current, attempt)


class _Binding(contextlib.AbstractContextManager[None], Generic[T]):
    __slots__ = ("token", "value", "var")

    def __init__(self, var: ContextVar[T], value: T) -> None:
        self.var, self.value = var, value

    def __enter__(self) -> None:
        self.token = self.var.set(self.value)

    def __exit__(self, *exc: object) -> None:
        self.var.reset(self.token)


def binding(var: ContextVar[T], value: T) -> contextlib.AbstractContextManager[None]:
    """``var`` holds ``value`` inside the block, and what it held before after it (a class, not a
    generator: every attempt enters two, and a generator's costs a microsecond more)."""
    return _Binding(var, value)
