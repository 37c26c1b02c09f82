"""Write the dead-letter rows of dead jobs whose worker died (or whose database was down) before
writing them: the store moved them to DYING first, so nothing is lost meanwhile."""

from __future__ import annotations

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store.lifecycle import F
from django_jobs.worker.duties.base import Duty, Scope, Vanished
from django_jobs.worker.duties.items import Items, dying_age, job_id


class Dying(Duty):
    name = "finish_dying"
    every = 5.0

    def __init__(self, scope: Scope) -> None:
        super().__init__(scope)
        self.items = Items(scope)

    def run(self) -> None:
        store = self.scope.store
        for member in store.dying(older_than=dying_age()):
            self.items.handle(store.keys.dying, member, self._bury)

    def _bury(self, member: bytes) -> None:
        store = self.scope.store
        job = job_id(member)
        record = store.record(job)
        if record.readable and not record.exists:
            raise Vanished("The dead job's hash is gone from Redis (evicted or deleted).")
        failure = deadletter.Failure(
            job_id=job,
            queue=record.queue,
            reason=record.text(F.REASON, DeadLetter.Reason.UNDECODABLE.value),
            exception=record.text(F.EXCEPTION, "django_jobs.exceptions.PayloadError"),
            message=record.text(F.MESSAGE, "The job hash in Redis is not a django_jobs job."),
            traceback=record.text("exc_info"),
            history=record.history,
        )
        deadletter.bury(store, failure, record.snapshot)
