"""Move aside a queue, lease or scheduled key of the wrong type, so it stops failing every job. Runs
before the relay, whose pushes a broken key would fail."""

from __future__ import annotations

from django_jobs.worker import structure
from django_jobs.worker.duties.base import Duty


class Structures(Duty):
    name = "check_structures"
    every = 1.0

    def run(self) -> None:
        structure.quarantine_wrong_types(self.scope.store, self.scope.queues)
