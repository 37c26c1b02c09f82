"""The "capture" backend: record each job, arguments decoded, for a test to assert on."""

from __future__ import annotations

import datetime as dt
import functools
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_jobs.client.backends import deferral, inline
from django_jobs.core import execution, payload, registry
from django_jobs.core.envelope import Envelope
from django_jobs.exceptions import JobNotFound

#: The worker name a captured job's attempt runs under, in :meth:`Captured.run`.
WORKER = "capture"


@dataclass(frozen=True)
class CapturedJob:
    """A job that capture mode recorded instead of queueing, with its arguments decoded."""

    id: str
    name: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    priority: int = 0
    expires_at: dt.datetime | None = None  # when it would be dropped unrun if it had not started
    envelope: Envelope | None = field(default=None, compare=False, repr=False)  # the job as enqueued

    @property
    def expired(self) -> bool:
        """Whether its expiry has passed: a worker would drop it rather than run it now."""
        return self.expires_at is not None and self.expires_at <= dt.datetime.now(dt.UTC)


@dataclass
class Captured:
    """The jobs captured inside one ``capture_jobs()`` block, with assertion helpers."""

    jobs: list[CapturedJob] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.jobs)

    def __iter__(self) -> Iterator[CapturedJob]:
        return iter(self.jobs)

    def named(self, job: registry.Job[Any, Any] | str) -> list[CapturedJob]:
        name = job if isinstance(job, str) else job.name
        return [j for j in self.jobs if j.name == name]

    def assert_enqueued(self, job: registry.Job[Any, Any] | str, *args: Any, **kwargs: Any) -> CapturedJob:
        """Assert one captured job of this kind was called with these arguments.

        Both calls are bound to the job function's signature first, so ``send_welcome(1)`` matches
        ``assert_enqueued(send_welcome, user_id=1)`` and defaults count as passed.
        """
        name = job if isinstance(job, str) else job.name
        expected = _bound(name, list(args), kwargs)
        matches = [j for j in self.named(name) if _bound(name, j.args, j.kwargs) == expected]
        if len(matches) != 1:
            found = f"{len(matches)} such calls" if matches else "none"
            seen = "\n".join(f"  {_call(j.name, j.args, j.kwargs)}" for j in self.jobs) or "  (nothing)"
            raise AssertionError(
                f"expected one {_call(name, list(args), kwargs)}, found {found}; captured:\n{seen}"
            )
        return matches[0]

    def run(self) -> None:
        """Run the captured jobs now, in order, each through the worker's own attempt: plain and
        ``async def`` jobs alike, ``current_job()`` set, and its outcome published as a worker's is
        (signals, dead letters, batches). One whose expiry has passed is dropped unrun, as a worker
        would drop it (``job_expired``). What a job raises, or a ``Snooze`` it returns, is raised
        once its outcome is published, and the jobs after it do not run: nothing here waits."""
        caller = execution.caller_transactions()
        for captured in self.jobs:
            if captured.envelope is None:
                raise ValueError(f"Job {captured.id} was not captured by capture mode: nothing to run.")
            if captured.expired:
                inline.expired(captured.envelope)
                continue
            inline.run(captured.envelope, WORKER, caller)


def _bound(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
    """The call as the function sees it (every parameter by name, defaults applied), when it binds."""
    try:
        signature = inspect.signature(registry.get(name).func)
        bound = signature.bind(*args, **kwargs)
    except (JobNotFound, TypeError, ValueError):
        return (args, kwargs)  # an unknown job or a call that cannot bind: compare as written
    bound.apply_defaults()
    return bound.arguments


def _call(name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """``name(1, user_id=2)``: one call the way it reads in code."""
    parts = [repr(value) for value in args] + [f"{key}={value!r}" for key, value in kwargs.items()]
    return f"{name}({', '.join(parts)})"


#: The open ``capture_jobs()`` blocks, innermost last; each receives every job captured meanwhile.
active: list[Captured] = []
#: Receives captured jobs when MODE is "capture" through settings and no capture_jobs() block is open.
default_capture = Captured()


def _record(envelopes: Sequence[Envelope]) -> None:
    for envelope in envelopes:
        name, args, kwargs = payload.loads(envelope.data)
        for captured in active or [default_capture]:
            expires = dt.datetime.fromtimestamp(envelope.expires, dt.UTC) if envelope.expires else None
            job = CapturedJob(
                envelope.id, name, envelope.queue, args, kwargs, envelope.priority, expires, envelope
            )
            captured.jobs.append(job)


def deliver(envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None:
    """Record the jobs when the transaction they wait for would commit."""
    deferral.at_commit(alias, functools.partial(_record, envelopes))
