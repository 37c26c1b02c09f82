"""Delete a page of what outlived its retention: idempotency keys, ended batches, the history. Each is a duty
of its own, so a failing one never holds the other back; only the lead server's maintenance runs
them (the database is one for every server: once per runjobs is enough)."""

from __future__ import annotations

from django_jobs.flow import idempotency
from django_jobs.telemetry import history
from django_jobs.worker.duties.base import Duty
from django_jobs.workflows import batches


class KeyPrune(Duty):
    name = "prune_keys"
    every = 600.0

    def run(self) -> None:
        if self.scope.lead:
            idempotency.prune()


class BatchPrune(Duty):
    name = "prune_batches"
    every = 600.0

    def run(self) -> None:
        if self.scope.lead:
            batches.prune()


class HistoryPrune(Duty):
    name = "prune_history"
    every = 10.0

    def run(self) -> None:
        if self.scope.lead:
            history.prune()
