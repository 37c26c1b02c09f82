"""Enqueue the periodic jobs that are due, of the queues this server's maintenance owns."""

from __future__ import annotations

from ...cron import Scheduler
from .base import Duty, Scope


class Cron(Duty):
    name = "cron"
    at_most = 0.2

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.scheduler = Scheduler(scope.store.connection, scope.owns)

    def run(self) -> None:
        self.scheduler.tick()
