"""Calling a job's function: a plain or an ``async def`` one, and its return value as JSON.

Shared by the worker's attempts and the immediate backend, so a job behaves the same in both.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from django_jobs.exceptions import JobTimeout, ResultError

#: An ``async def`` job is cancelled at its timeout on its event loop; the alarm that stops code
#: blocking the loop fires this much later, and the supervisor's hard kill after that.
ASYNC_ALARM_MARGIN = 1.0


def call(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], *, timeout: float, is_async: bool
) -> Any:
    """Run ``func`` and return what it returned; an ``async def`` one on a fresh event loop, where
    its timeout cancels it (``JobTimeout``), as the soft timeout stops a plain one."""
    if not is_async:
        return func(*args, **kwargs)
    return asyncio.run(_bounded(func(*args, **kwargs), timeout))


async def _bounded(awaitable: Awaitable[Any], timeout: float) -> Any:
    try:
        async with asyncio.timeout(timeout) as deadline:
            return await awaitable
    except TimeoutError:
        if deadline.expired():  # ours; a TimeoutError of the job's own (an HTTP client's) stays its own
            raise JobTimeout(f"Job ran longer than its timeout of {timeout:g} s.") from None
        raise


def result_json(name: str, value: Any) -> str:
    """The return value as strict JSON text, or ``ResultError``: a permanent failure of the attempt."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ResultError(
            f"Job {name} returned a {type(value).__name__}, which cannot be stored as JSON ({exc}). "
            "Return IDs and plain values (str, int, float, bool, None, lists and dicts of them)."
        ) from None
