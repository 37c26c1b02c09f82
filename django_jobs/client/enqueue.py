"""Transaction-aware, durable enqueue: encode the call, build envelopes, hand them to the backend
``JOBS["MODE"]`` names, with the database whose commit they must wait for (see ``backends``)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import math
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, Protocol

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_jobs.client import backends
from django_jobs.conf import jobs_settings
from django_jobs.core import payload, tracing
from django_jobs.core.connections import queue_config
from django_jobs.core.context import binding
from django_jobs.core.envelope import Call, Envelope, Options
from django_jobs.core.registry import Job
from django_jobs.core.results import JobHandle
from django_jobs.exceptions import TransactionAmbiguous
from django_jobs.signals import job_enqueued
from django_jobs.store import new_job_id

__all__ = [
    "Envelope",
    "Gathering",
    "JobHandle",
    "Options",
    "build",
    "current_gathering",
    "deliver",
    "enqueue_calls",
    "enqueue_envelopes",
    "gathering",
    "transaction_alias",
]


class Gathering(Protocol):
    """A batch whose block is open (``batches.batch``): each job enqueued in the block, in this
    context, carries its ``id`` and is handed to ``gather`` before it is delivered."""

    @property
    def id(self) -> str: ...

    def gather(self, envelopes: Sequence[Envelope], using: str | None) -> None: ...


_gathering: ContextVar[Gathering | None] = ContextVar("django_jobs_gathering", default=None)


def gathering(into: Gathering) -> contextlib.AbstractContextManager[None]:
    """Inside the block, the jobs enqueued in this context join ``into``."""
    return binding(_gathering, into)


def current_gathering() -> Gathering | None:
    """The batch whose block is open in this context, if any."""
    return _gathering.get()


def build(
    name: str,
    queue: str,
    timeout: float,
    args: list[Any],
    kwargs: dict[str, Any],
    options: Options = Options(),
    limit_key: str = "",
) -> Envelope:
    """An envelope for already-encoded arguments (dead-letter requeues come through here too),
    carrying the current trace context, if any, and the key its limits count under, if given."""
    queue_config(queue)  # an unknown queue fails at the first enqueue, not at import
    data = payload.dumps(name, args, kwargs, jobs_settings.MAX_PAYLOAD_BYTES).decode()
    now = dt.datetime.now(dt.UTC)
    due = now.timestamp() + options.delay if options.delay > 0 else 0.0
    expires = options.expires_at or (now.timestamp() + options.expires_in if options.expires_in else 0.0)
    return Envelope(new_job_id(), name, queue, data, math.ceil(timeout), due, now, options.unique_key,
                    options.debounce, options.cron_run, options.priority or 0, tracing.carrier(),
                    expires, options.batch, limit_key)  # fmt: skip


def _in_transaction(conn: BaseDatabaseWrapper) -> bool:
    """True inside a real transaction: an atomic block not opened by Django's TestCase, or autocommit off.
    Takes the connection, not its alias: each ``connections[alias]`` costs a thread-local lookup."""
    if conn.connection is not None and not conn.autocommit and not conn.in_atomic_block:
        return True
    return any(not getattr(block, "_from_testcase", False) for block in getattr(conn, "atomic_blocks", []))


def transaction_alias(using: str | None) -> str | None:
    """The alias whose commit the job must wait for, or None to push now."""
    if using is not None:
        return using if _in_transaction(connections[using]) else None
    # Only connections already opened in this thread can be inside a transaction.
    active = [conn.alias for conn in connections.all(initialized_only=True) if _in_transaction(conn)]
    if len(active) > 1:
        raise TransactionAmbiguous(
            f"Databases {', '.join(sorted(active))} are all inside a transaction; "
            "call job.using('<alias>').enqueue(...) so the job waits for the right commit."
        )
    return active[0] if active else None


def enqueue_calls(
    definition: Job[Any, Any],
    calls: Sequence[Call],
    *,
    using: str | None = None,
    options: Options = Options(),
) -> list[JobHandle]:
    """Encode, then deliver according to ``JOBS["MODE"]`` and the current transaction."""
    envelopes = enqueue_envelopes(definition, calls, using=using, options=options)
    return [JobHandle(e.id, e.name, e.queue) for e in envelopes]


def enqueue_envelopes(
    definition: Job[Any, Any],
    calls: Sequence[Call],
    *,
    using: str | None = None,
    options: Options = Options(),
) -> list[Envelope]:
    """:func:`enqueue_calls`, returning the envelopes themselves: their ids and enqueue times
    (``created_at``, which ``get_job()`` reads back as ``enqueued_at``)."""
    options = _with_job_defaults(options, definition.priority, definition.expires)
    into = _gathering.get()
    if into is not None:
        options = dataclasses.replace(options, batch=into.id)
    envelopes = []
    for args, kwargs in calls:
        encoded_args, encoded_kwargs = payload.encode(args, kwargs)
        envelopes.append(
            build(
                definition.name,
                options.queue or definition.queue,
                definition.timeout,
                encoded_args,
                encoded_kwargs,
                options,
                definition.limit_value(args, kwargs),
            )
        )
    if into is not None:
        into.gather(envelopes, using)
    deliver(envelopes, using=using)
    for envelope in envelopes:
        job_enqueued.send(sender=envelope.name, job_id=envelope.id, queue=envelope.queue)
    return envelopes


@functools.lru_cache(maxsize=256)
def _with_job_defaults(options: Options, priority: int, expires: float | None) -> Options:
    """``options`` with the job type's priority and expiry where the enqueue gave none. Cached: the
    options of one call site repeat, and two dataclass copies cost more than the rest of an enqueue."""
    if options.priority is None:
        options = dataclasses.replace(options, priority=priority)
    if expires and not (options.expires_in or options.expires_at):
        options = dataclasses.replace(options, expires_in=expires)
    return options


def deliver(envelopes: list[Envelope], *, using: str | None = None) -> None:
    """Send built envelopes on their way through the backend of ``JOBS["MODE"]``."""
    if envelopes:
        backends.for_mode(jobs_settings.MODE).deliver(envelopes, transaction_alias(using), using)
