"""Calling a job's function: a plain or an ``async def`` one, and its return value as JSON.

Shared by the worker's attempts and the immediate backend, so a job behaves the same in both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from asgiref.sync import sync_to_async

from django_jobs.exceptions import JobTimeout, ResultError

#: An ``async def`` job is cancelled at its timeout on its event loop; the alarm that stops code
#: blocking the loop fires this much later, and the supervisor's hard kill after that.
ASYNC_ALARM_MARGIN = 1.0


#: How an ``async def`` job's coroutine is run to its end from a synchronous caller.
Runner = Callable[[Coroutine[Any, Any, Any]], Any]
#: This thread's runner, if not ``asyncio.run`` (a fresh loop per job): a work process's lane runs
#: the coroutine on the process's one shared loop instead (``worker.lanes``).
_runner: ContextVar[Runner | None] = ContextVar("django_jobs_coroutine_runner", default=None)


@contextlib.contextmanager
def coroutines_run_by(runner: Runner) -> Iterator[None]:
    """Inside the block, ``async def`` jobs called from this thread are run by ``runner``."""
    reset = _runner.set(runner)
    try:
        yield
    finally:
        _runner.reset(reset)


class Tidy(Protocol):
    """Connection hygiene of the thread an ``async def`` job's ORM calls run in."""

    def before(self) -> None: ...

    def after(self) -> None: ...


def call(
    func: Callable[..., Any],
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    timeout: float,
    is_async: bool,
    tidy: Tidy | None = None,
) -> Any:
    """Run ``func`` and return what it returned; an ``async def`` one on a fresh event loop, where
    its timeout cancels it (``JobTimeout``), as the soft timeout stops a plain one.

    ``tidy``: run before and after an ``async def`` job through ``sync_to_async``, so in the thread
    the async ORM uses (asgiref's thread-sensitive one, which outlives the job), never seen from
    the calling thread."""
    if not is_async:
        return func(*args, **kwargs)
    return (_runner.get() or asyncio.run)(_tidied(func, args, kwargs, timeout, tidy))


async def _tidied(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any], timeout: float, tidy: Tidy | None
) -> Any:
    if tidy is None:
        return await _bounded(func(*args, **kwargs), timeout)
    await sync_to_async(tidy.before)()
    try:
        return await _bounded(func(*args, **kwargs), timeout)
    finally:  # after a call the job's timeout cancelled, this waits for it: the alarm bounds that
        await sync_to_async(tidy.after)()


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
