"""What maintenance does with the store: reap expired leases, promote due jobs and wake parked
lines (one script), scan the lost, dying and vanished sets, put a member behind the others, move a
broken key aside, and forget what is dead-lettered."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Sequence

from django_jobs.store import keys, model
from django_jobs.store.claim import limit_entries
from django_jobs.store.model import VanishedId
from django_jobs.store.record import rq_timestamp, text, to_bytes
from django_jobs.store.scripts import Part, queue_keys


@functools.lru_cache(maxsize=64)
def _keyed(limits: str) -> str:
    """The limits of the names with ``limit_key``, as the claim's entries hold them, by their scope's
    prefix (``<canonical name>\\n``): a type's slots are the claim's business only."""
    entries = limit_entries(limits, [])
    return json.dumps({entry["scope"]: entry for entry in entries.values() if "scope" in entry})


class Maintenance(Part):
    """Maintenance's transitions and scans."""

    def maintain(self, queues: Sequence[str], limits: str = "{}", batch: int = 500) -> tuple[int, int, int]:
        """Reap expired leases into LOST, promote due scheduled jobs, and wake the jobs parked over their
        key's limit (``limits``: ``registry.limits_json()``) in lines due to be looked at whose key has
        room again; returns the three counts."""
        lost, promoted, woken = self.scripts.maintain(
            leases=keys.LEASES,
            lost=keys.LOST,
            dying=keys.DYING,
            queues_set=keys.QUEUES_SET,
            queue=[queue_keys(queue) for queue in queues],
            batch=batch,
            stamp=rq_timestamp(dt.datetime.now(dt.UTC)),  # RQ's meaning: when the job was put on its queue
            prefix=keys.JOB_PREFIX,
            keyed=_keyed(limits),
            recheck=model.PARK_RECHECK,
            hold=model.TURN_HOLD,  # read at each call: a test shortens it
        )
        return int(lost), int(promoted), int(woken)

    def _due(self, key: str, older_than: float, limit: int) -> list[bytes]:
        return list(self.scripts.due(set=key, older_than=older_than, limit=limit))

    def lost_tokens(self, limit: int = 100) -> list[bytes]:
        """Lost attempts due to be settled, as raw bytes: whatever was planted, the scan never fails."""
        return self._due(keys.LOST, 0, limit)

    def dying(self, older_than: float, limit: int = 100) -> list[bytes]:
        """Jobs stuck between "dead" and "row written" for longer than ``older_than`` seconds (raw ids)."""
        return self._due(keys.DYING, older_than, limit)

    def defer(self, key: str, member: bytes, seconds: float) -> None:
        """Put one member of LOST, DYING or VANISHED behind the others, so a scan's head always moves on."""
        self.scripts.defer(set=key, member=member, seconds=seconds)

    def move_aside(self, key: str, moved: str, kind: str) -> bool:
        """Rename a structure key to ``moved`` (see ``keys.quarantine_key``) if it still has the wrong
        type ``kind``; False if someone fixed it meanwhile."""
        return bool(self.scripts.move_aside(key=key, moved=moved, kind=kind))

    def vanished(self, limit: int = 100) -> list[VanishedId]:
        """Ids the claim found without a hash that are due, oldest first (a deferred one waits)."""
        found = []
        for member in self._due(keys.VANISHED, 0, limit):
            queue, _, job_id = text(member).partition("\n")
            found.append(VanishedId(member, queue, job_id))
        return found

    def forget_vanished(self, item: VanishedId) -> bool:
        """Drop an id whose dead letter exists; False if another runjobs already did."""
        return bool(self.connection.zrem(keys.VANISHED, item.member))

    def buried(self, job_id: str, ttl: int) -> None:
        self.settled(keys.DYING, to_bytes(job_id), to_bytes(job_id), ttl)

    def settled(self, key: str, member: bytes, job_id: bytes, ttl: int, queue: str = "") -> None:
        """Drop a member of ``key`` whose dead letter is written; its job hash expires after ``ttl``."""
        wip = keys.wip_key(queue) if queue else None
        self.scripts.buried(
            holder=key, hash=keys.JOB_PREFIX.encode() + job_id, wip=wip, member=member, ttl=ttl
        )
