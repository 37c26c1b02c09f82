"""Where an enqueued job goes: ``JOBS["MODE"]`` names a backend, and enqueue hands it the envelopes.

* ``redis`` ("queue"): push to Redis, through the outbox inside a transaction or when Redis is down;
* ``immediate``: run the job inline, at commit inside a transaction;
* ``capture``: record the job for a test's assertions.

The test modes are backends like the real one, not branches in enqueue. Each backend knows
nothing of the others; the deferral to a test's commit they share lives in ``deferral``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from django_jobs.client.backends import capture, immediate, redis
from django_jobs.core.envelope import Envelope


class Backend(Protocol):
    """Delivers built envelopes. ``alias`` is the database whose commit they wait for, or None;
    ``using`` is the alias the caller named, if any (where a push that fails writes its rows)."""

    def deliver(self, envelopes: Sequence[Envelope], alias: str | None, using: str | None) -> None: ...


BACKENDS: dict[str, Backend] = {"queue": redis, "immediate": immediate, "capture": capture}


def for_mode(mode: str) -> Backend:
    """The backend of ``JOBS["MODE"]`` (``manage.py check`` reports an unknown mode)."""
    return BACKENDS[mode]
