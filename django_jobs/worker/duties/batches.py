"""Settle the batch members whose end no event reported: one page of the sweep per run."""

from __future__ import annotations

from ... import batches
from .base import Duty, Scope


class BatchSweep(Duty):
    name = "sweep_batches"
    at_most = 1.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.sweep = batches.Sweep()

    def run(self) -> None:
        self.sweep.step()
