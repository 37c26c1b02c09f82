"""The "immediate" backend: run each job inline, at commit inside a transaction, through the worker's
own attempt (``inline``): its outcome is published as a worker's is (signals, dead letters, batches,
periodic runs, metrics, the log line), then what the job raised propagates to the code that enqueued
it (or to the commit), as a test wants.

Nothing here waits: a failure the retry policy would retry is published as the worker would publish
it (``job_failed``, then ``job_retrying``) and raised, and the job is not run again; a permanent one
(or a result that is not JSON) is dead-lettered first. A job runs at once, so its expiry never
passes. A ``Snooze`` it raises or returns is published (``job_snoozed``) and raised to the caller, so
a test can assert the snooze."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from django_jobs.client.backends import deferral, inline
from django_jobs.core import execution
from django_jobs.core.envelope import Envelope

#: The worker name an immediate attempt runs under (``JobState.worker_ids``, a task's ``worker_ids``).
WORKER = "immediate"


def _run(envelopes: Sequence[Envelope]) -> None:
    caller = execution.caller_transactions()
    for envelope in envelopes:
        inline.run(envelope, WORKER, caller)


def deliver(envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None:
    """Run the jobs when the transaction they wait for would commit."""
    deferral.at_commit(alias, functools.partial(_run, envelopes))
