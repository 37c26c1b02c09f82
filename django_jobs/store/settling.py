"""The fenced ends of an attempt besides its completion (which rides on the next claim): a failure
(retry, dead letter, cancel), a hand-back, a snooze. Each is refused once the attempt's lease is gone."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from django_jobs.store.interface import Packer
from django_jobs.store.keys import Keyspace
from django_jobs.store.model import Scope, Settled
from django_jobs.store.record import rq_timestamp, split_token, to_bytes
from django_jobs.store.scripts import INTERFACES, Ending, Part


def _ending(delay: float | None, cancel: bool) -> Ending:
    if cancel:
        return Ending.CANCEL
    if delay is None:
        return Ending.DEAD
    return Ending.RETRY if delay > 0 else Ending.REQUEUE


@functools.lru_cache(maxsize=256)
def _packer(keys: Keyspace, script: str, queue: str) -> Packer:
    """The packer of a settling script's calls for the jobs of ``queue``: the leases, the lost (and
    the dying) set and the queue's keys packed once."""
    fixed = {"leases": keys.leases, "lost": keys.lost, "queue": keys.queue_keys(queue)}
    return INTERFACES[script].packer(**fixed, **({"dying": keys.dying} if script == "fail" else {}))


class Settling(Part):
    """Fail, release and snooze a running job, fenced by its lease token."""

    def _settle(self, script: str, token: str, queue: str, scope: Scope | None, **named: Any) -> Settled:
        """Run a settling script with the names they all share (the job, its token, its scope, the
        stamp) and its own ``named``."""
        call = _packer(self.keys, script, queue)(
            hash=self.keys.job(split_token(token)),
            token=token,
            scope=scope.places(queue, self.keys) if scope else None,
            stamp=rq_timestamp(dt.datetime.now(dt.UTC)),
            **named,
        )
        return Settled(getattr(self.scripts, script).script(*call))

    def fail(
        self,
        token: str,
        queue: str,
        *,
        delay: float | None,
        fields: dict[str, Any],
        finished_ttl: int,
        lost: bool = False,
        cancel: bool = False,
        scope: Scope | None = None,
    ) -> Settled:
        """Record a failed attempt: retry after ``delay`` seconds (0: at the head of the queue now),
        (``None``) start dead-lettering, or (``cancel``) end it cancelled, as it also ends whatever was
        asked once its cancel was requested. ``lost``: the reaper already moved its lease to LOST.
        ``scope``: the key (``limit_key``) whose slot it frees for the next parked job."""
        # A message can hold lone surrogates (an exception quoting bad input): kept, not a crash.
        values = [to_bytes(v) if isinstance(v, str) else v for pair in fields.items() for v in pair]
        return self._settle(
            "fail",
            token,
            queue,
            scope,
            held=self.keys.lost if lost else self.keys.leases,
            mode=_ending(delay, cancel),
            delay=delay or 0,
            finished_ttl=finished_ttl,
            fields=values,
        )

    def snooze(
        self, token: str, queue: str, seconds: float, finished_ttl: int, scope: Scope | None = None
    ) -> Settled:
        """Reschedule a running job ``seconds`` from now, at its priority, giving back the attempt its
        claim counted and counting the snooze (``dj_snoozes``), fenced by the lease token like
        :meth:`fail`; a job whose cancel was requested is cancelled instead. ``scope``: the key
        (``limit_key``) whose slot it frees for the next parked job, as a retry does."""
        return self._settle("snooze", token, queue, scope, seconds=seconds, finished_ttl=finished_ttl)

    def release(self, token: str, queue: str, finished_ttl: int, scope: Scope | None = None) -> Settled:
        """Put a running job back at the head of its queue (of its priority) without spending an
        attempt, keeping its key's slot (``scope``: its ``limit_key``'s); a job whose cancel was
        requested is cancelled instead."""
        return self._settle("release", token, queue, scope, finished_ttl=finished_ttl)
