"""Send the summary of each dead-letter group whose alert window closed."""

from __future__ import annotations

from django_jobs.failures import alerts
from django_jobs.worker.duties.base import Duty


class Alerts(Duty):
    name = "flush_alerts"
    every = 5.0

    def run(self) -> None:
        alerts.flush(self.scope.store.connection)
