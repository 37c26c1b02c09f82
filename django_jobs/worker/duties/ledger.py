"""The ledger's three duties (see ``worker.ledger``, which holds their shared state): settle the rows
of jobs that ran here, notice a changed Redis primary, and sweep when one is due."""

from __future__ import annotations

from django_jobs.worker.duties.base import Duty, Scope
from django_jobs.worker.ledger import Ledger


class _LedgerDuty(Duty):
    def __init__(self, scope: Scope, ledger: Ledger) -> None:
        super().__init__(scope)
        self.ledger = ledger


class WatchPrimary(_LedgerDuty):
    name = "watch_primary"
    every = 1.0

    def run(self) -> None:
        self.ledger.watch_primary()


class Settle(_LedgerDuty):
    name = "settle_ledger"
    every = 1.0

    def run(self) -> None:
        self.ledger.settle()


class Sweep(_LedgerDuty):
    name = "sweep_ledger"
    at_most = 1.0

    def run(self) -> None:
        self.ledger.sweep_if_due()
