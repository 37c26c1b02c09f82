"""Dead-letter the ids a claim popped after their hash was gone, so no eviction is silent."""

from __future__ import annotations

import logging
from functools import partial

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import VanishedId
from django_jobs.telemetry import metrics
from django_jobs.worker.duties.base import Duty, Scope
from django_jobs.worker.duties.items import Items

logger = logging.getLogger("django_jobs.worker")


class Vanishing(Duty):
    name = "record_vanished"
    every = 5.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.items = Items(scope)

    def run(self) -> None:
        store = self.scope.store
        for item in store.vanished():  # one that fails waits behind the others
            self.items.or_defer(store.keys.vanished, item.member, partial(self._record, item))

    def _record(self, item: VanishedId) -> None:
        message = (
            f"The job's id was taken from queue {item.queue!r} but its hash was gone from Redis "
            "(evicted under maxmemory, or deleted), so nothing ran and its payload is lost."
        )
        deadletter.record(
            deadletter.Failure(item.id, item.queue, DeadLetter.Reason.VANISHED, "JobVanished", message),
            {},
        )
        if self.scope.store.forget_vanished(item):  # counted and logged once, by whoever removed it
            metrics.vanished(item.queue)
            logger.warning(
                "Job %s vanished from queue %s: %s Recorded as a dead letter.", item.id, item.queue, message
            )
