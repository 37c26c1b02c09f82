"""Settle the batch members whose end no event reported: one page of the sweep per run."""

from __future__ import annotations

from django_jobs.worker.duties.base import Duty, Scope
from django_jobs.workflows import batches


class BatchSweep(Duty):
    name = "sweep_batches"
    at_most = 1.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.sweep = batches.Sweep()

    def run(self) -> None:
        self.sweep.step()
