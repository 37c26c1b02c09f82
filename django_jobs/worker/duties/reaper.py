"""Promote due scheduled jobs, reap expired leases into LOST, wake jobs parked in their key's line
that a wake-up missed (one script), then settle the lost attempts of this server's queues."""

from __future__ import annotations

from django_jobs.core import execution, outcomes, registry
from django_jobs.exceptions import WorkerLost
from django_jobs.store import Claimed
from django_jobs.worker.duties.base import Duty, Scope, Unreadable, Vanished
from django_jobs.worker.duties.items import Items, decoded, job_id, raw_id

#: Seconds a lost attempt of a queue this runjobs does not serve waits before this one looks again.
FOREIGN_AFTER = 1.0


class Reaper(Duty):
    name = "promote_and_reap"

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.items = Items(scope)
        self.limits = registry.limits_json()  # the registry is complete once Django is set up

    def run(self) -> None:
        store = self.scope.store
        store.maintain(self.scope.queues, self.limits)
        for token in store.lost_tokens():
            self.items.handle(store.keys.lost, token, self._settle_lost)

    def _settle_lost(self, member: bytes) -> None:
        store = self.scope.store
        job = job_id(raw_id(member, token=True))
        token = decoded(member, "lease token")
        record = store.record(job)
        if record.readable and not record.exists:
            raise Vanished("The job's hash is gone from Redis (evicted or deleted); nothing can run it.")
        if not record.readable or not record.fields.get("origin"):
            raise Unreadable(f"The job hash names no queue: {record.problem or 'no origin field'}")
        queue = decoded(record.fields["origin"], "queue name in the job hash")
        if queue not in self.scope.queues:
            store.defer(store.keys.lost, member, FOREIGN_AFTER)  # the runjobs serving that queue settles it
            return
        claimed = Claimed(queue, job, token, record)
        lost = WorkerLost("The worker running this job died: its lease expired unrenewed.")
        outcomes.publish(execution.settle_failure(store=store, claimed=claimed, lost=True, exc=lost))
