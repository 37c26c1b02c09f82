"""What an operator does to jobs and types: cancel a job, run a scheduled one now, pause and resume
a queue or a job type, and put a type's parked jobs back on their queue."""

from __future__ import annotations

import datetime as dt

from redis.exceptions import ResponseError

from django_jobs.store import keys
from django_jobs.store.lifecycle import F
from django_jobs.store.model import CancelResult
from django_jobs.store.record import rq_timestamp, text
from django_jobs.store.scripts import Part

#: The cancel script's replies.
_CANCEL_REPLIES = {
    0: CancelResult.NOT_FOUND,
    1: CancelResult.CANCELLED,
    2: CancelResult.REQUESTED,
    3: CancelResult.ALREADY_ENDED,
}

#: Cancels of a job that a claim parks (or a resume releases) under it, before one gives up.
_CANCEL_TRIES = 10


class Control(Part):
    """Cancel, run now, pause, resume, unpark."""

    def cancel(self, job_id: str, finished_ttl: int) -> CancelResult:
        """Cancel a waiting job, or ask a running one to stop (see ``lua/cancel.lua``).

        Two round trips: the job's queue (its hash's ``origin``) names the keys the script is given,
        and so do its parked list, if a paused type parked it (``dj_parked``), and the scope of a job
        waiting its key's turn (``dj_line``): its line, and the slots where a woken one holds its slot.
        A job parked or released in between is asked about again."""
        for _ in range(_CANCEL_TRIES):
            try:
                origin, parked, line = self.connection.hmget(
                    self.keys.job(job_id), [F.ORIGIN, F.PARKED, F.LINE]
                )
            except ResponseError:  # not a hash: no job of ours
                return CancelResult.NOT_FOUND
            if origin is None:
                return CancelResult.NOT_FOUND
            queue, name = text(origin), text(parked) if parked is not None else ""
            scope = text(line) if line is not None else ""
            reply = self.scripts.cancel(
                hash=self.keys.job(job_id),
                queue=self.keys.queue_keys(queue),
                parked=self.keys.parked(queue, name) if name else None,
                line={"line": self.keys.parked_line(queue, scope), "slots": self.keys.slots(scope)}
                if scope
                else None,
                id=job_id,
                stamp=rq_timestamp(dt.datetime.now(dt.UTC)),
                finished_ttl=finished_ttl,
                parked_as=name,
                line_as=scope,
            )
            if int(reply) in _CANCEL_REPLIES:
                return _CANCEL_REPLIES[int(reply)]
        raise ResponseError(
            f"Job {job_id} kept moving in and out of a parked list or line; nothing cancelled."
        )

    def run_now(self, job_id: str, queue: str) -> int:
        """Move a scheduled job onto its queue now: 1 moved, 0 it was not scheduled, -1 no such job."""
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        return int(
            self.scripts.run_now(
                hash=self.keys.job(job_id),
                queues_set=self.keys.queues_set,
                queue=self.keys.queue_keys(queue),
                id=job_id,
                stamp=stamp,
            )
        )

    def pause(self, kind: str, name: str, *, by: str, reason: str) -> bool:
        """Pause a queue or a job type on this server (Redis time, who, why); False if it already was,
        and its record is kept."""
        return bool(
            self.scripts.pause(
                paused=self.keys.paused, field=keys.pause_field(kind, name), by=by, reason=reason
            )
        )

    def resume(self, kind: str, name: str) -> bool:
        """Lift a pause; False if there was none. A job type's parked jobs stay parked until
        :meth:`unpark` moves them (which it does only once the type is not paused)."""
        return bool(self.connection.hdel(self.keys.paused, keys.pause_field(kind, name)))

    def unpark(self, queue: str, name: str, batch: int = 500) -> tuple[int, int]:
        """Move up to ``batch`` parked jobs of type ``name`` back to the head of ``queue``, unless the
        type is paused (see ``lua/unpark.lua``); returns (moved, still parked)."""
        moved, left = self.scripts.unpark(
            paused=self.keys.paused,
            parked_lists=self.keys.parked_lists,
            parked=self.keys.parked(queue, name),
            queues_set=self.keys.queues_set,
            queue=self.keys.queue_keys(queue),
            field=keys.pause_field("job", name),
            batch=batch,
            prefix=self.keys.job_prefix,
            queue_name=queue,
            name=name,
        )
        return int(moved), int(left)
