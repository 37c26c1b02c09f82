"""Delete a page of what outlived its retention: idempotency keys, ended batches, the history. Each is a duty
of its own, so a failing one never holds the others back; only the lead server's maintenance runs
them (the database is one for every server: once per runjobs is enough)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from django_jobs.flow import idempotency
from django_jobs.telemetry import history
from django_jobs.worker.duties.base import Duty
from django_jobs.workflows import batches


class _LeadPrune(Duty):
    """One prune, run by the lead server's maintenance only."""

    prune: ClassVar[Callable[[], object]]

    def run(self) -> None:
        if self.scope.lead:
            type(self).prune()


class KeyPrune(_LeadPrune):
    name = "prune_keys"
    every = 600.0
    prune = staticmethod(lambda: idempotency.prune())  # looked up when it runs


class BatchPrune(_LeadPrune):
    name = "prune_batches"
    every = 600.0
    prune = staticmethod(lambda: batches.prune())


class HistoryPrune(_LeadPrune):
    name = "prune_history"
    every = 10.0
    prune = staticmethod(lambda: history.prune())
