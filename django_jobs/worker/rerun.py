"""Jobs that already ran, handed out again after a Redis failover.

A replica that a failover promoted lacks its primary's last writes: a "ledger" job that ended in them
is still queued (or leased) there, and would run again. Its ledger row says otherwise: the row is
deleted once the job's code returned (or the job ended), so a job pushed with its row (the hash's
``F.LEDGER``) whose row is gone has run. It is then ended without running: finished, or dead when its
dead letter exists (a cancelled one, whose ``cancel()`` deleted the row, ends finished too).

Looking costs a query per job, so a work process looks only for ``window_seconds()`` after Redis
failed and answered again as it saw it, or after its supervisor saw the primary change (both open
the runjobs' shared :class:`Window`): otherwise a claim pays one read of shared memory.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import math
import mmap
import struct
import time

from django.db import DatabaseError

from django_jobs.conf import LEDGER, jobs_settings
from django_jobs.core import registry
from django_jobs.models import DeadLetter, OutboxEntry, outbox_aliases
from django_jobs.store import Claimed, Finished, Store
from django_jobs.store.lifecycle import F

logger = logging.getLogger("django_jobs.worker")

#: Seconds a window lasts besides two leases: the leases the old primary handed out must expire, be
#: reaped and their jobs claimed again within it.
WINDOW_BASE = 30.0
#: A job younger than this (its enqueue, to its claim) is never looked at: its row, written beside
#: the push, may still be on its way; no failover hands a job out again this fast.
MIN_AGE = 1.0
_SLOT = struct.Struct("dd")


def window_seconds() -> float:
    return WINDOW_BASE + 2 * jobs_settings.LEASE_SECONDS


class Window:
    """Until when (``time.monotonic()``, which Linux shares between processes) the work processes of
    one runjobs look for jobs that already ran: anonymous shared memory, made before the forks."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, _SLOT.size)

    def open(self) -> None:
        """Look from now on, for ``window_seconds()``."""
        until = time.monotonic() + window_seconds()
        if until > self.until():
            _SLOT.pack_into(self._memory, 0, until, until)  # twice: a torn read shows as a mismatch

    def until(self) -> float:
        first, second = _SLOT.unpack_from(self._memory, 0)
        return float(first) if first == second else math.inf  # a write under way: it opens

    def is_open(self) -> bool:
        return time.monotonic() < self.until()


class Ended(enum.Enum):
    FINISHED = "succeeded"
    DEAD = "dead-lettered"


def already_ran(claimed: Claimed) -> Ended | None:
    """How the job of ``claimed`` ended before, if its ledger row says it ran; None: run it (no mark,
    not a "ledger" queue now, too young, its row is there, or the database cannot tell)."""
    record = claimed.record
    if F.LEDGER not in record.fields or jobs_settings.durability(claimed.queue) != LEDGER:
        return None
    created = record.time(F.CREATED_AT)
    if created is None or (dt.datetime.now(dt.UTC) - created).total_seconds() < MIN_AGE:
        return None
    try:
        if any(OutboxEntry.objects.using(alias).filter(pk=claimed.id).exists() for alias in outbox_aliases()):
            return None
        dead = DeadLetter.objects.filter(job_id=claimed.id).exists()
    except DatabaseError as exc:
        logger.warning("Could not look up the ledger row of job %s (%s); running it.", claimed.id, exc)
        return None
    return Ended.DEAD if dead else Ended.FINISHED


def end(store: Store, claimed: Claimed, ended: Ended) -> None:
    """End the job of ``claimed`` without running it, as it ended before; its end was published then.
    A dead one goes to "dying", its hash given its dead letter's failure: the supervisor buries it
    (the dead letter exists: no second alert)."""
    ttl, scope = jobs_settings.FINISHED_TTL, registry.limit_scope(claimed.record)
    if ended is Ended.FINISHED:
        store.complete(Finished(claimed.token, claimed.queue, scope=scope), ttl)
    else:
        columns = {F.REASON: "reason", F.EXCEPTION: "exception", F.MESSAGE: "message"}
        failure = DeadLetter.objects.filter(job_id=claimed.id).values(*columns.values()).first() or {}
        fields = {name: failure.get(column, "") for name, column in columns.items()}
        store.fail(claimed.token, claimed.queue, delay=None, fields=fields, finished_ttl=ttl, scope=scope)
    logger.warning(
        "Job %s (%s) already ran (%s) before Redis lost that: its ledger row is gone. Not run again.",
        claimed.id, claimed.record.name, ended.value,
    )  # fmt: skip
