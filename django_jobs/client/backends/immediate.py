"""The "immediate" backend: run each job inline, at commit inside a transaction; what the job
raises propagates to the code that enqueued it (or to the commit), as a test wants.

A job runs at once, so its expiry never passes. A ``Snooze`` it raises or returns is raised to the
caller, like any exception: nothing here waits or runs it again, and a test can assert the snooze."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django_jobs.client.backends import deferral
from django_jobs.core import invocation, payload, registry
from django_jobs.core.envelope import Envelope
from django_jobs.exceptions import Snooze


def _run(envelopes: Sequence[Envelope]) -> None:
    for envelope in envelopes:
        name, args, kwargs = payload.loads(envelope.data)
        job = registry.get(name)
        value = invocation.call(job.func, args, kwargs, timeout=job.timeout, is_async=job.is_async)
        if isinstance(value, Snooze):
            raise value
        if job.store_result:
            invocation.result_json(name, value)  # a value the worker could not store fails here too


def deliver(envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None:
    """Run the jobs when the transaction they wait for would commit."""
    deferral.at_commit(alias, functools.partial(_run, envelopes))
