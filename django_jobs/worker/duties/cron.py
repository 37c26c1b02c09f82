"""Enqueue the periodic jobs that are due, of the queues this server's maintenance owns."""

from __future__ import annotations

from django_jobs.worker.duties.base import Duty, Scope
from django_jobs.workflows.cron import Scheduler


class Cron(Duty):
    name = "cron"
    at_most = 0.2

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.scheduler = Scheduler(scope.store.connection, scope.owns)

    def run(self) -> None:
        self.scheduler.tick()
