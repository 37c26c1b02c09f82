"""What maintenance does with the store: reap expired leases, promote due jobs and wake parked
lines (one script), scan the lost, dying and vanished sets, put a member behind the others, move a
broken key aside, and forget what is dead-lettered."""

from __future__ import annotations

import base64
import datetime as dt
import functools
import json
import zlib
from collections.abc import Sequence

from redis.exceptions import ResponseError

from django_jobs.store import keys, model
from django_jobs.store.claim import limit_entries
from django_jobs.store.keys import Keyspace
from django_jobs.store.model import VanishedId
from django_jobs.store.record import rq_timestamp, text, to_bytes
from django_jobs.store.scripts import Part


@functools.lru_cache(maxsize=64)
def _keyed(space: Keyspace, limits: str) -> str:
    """The limits of the names with ``limit_key``, as the claim's entries hold them, by their scope's
    prefix (``<canonical name>\\n``), each with its type's field in the paused hash (a paused type's
    lines are not woken): a type's slots are the claim's business only."""
    entries = limit_entries(space, limits, [])
    return json.dumps({
        entry["scope"]: entry | {"paused_field": keys.pause_field("job", entry["scope"][:-1])}
        for entry in entries.values() if "scope" in entry
    })  # fmt: skip


class Maintenance(Part):
    """Maintenance's transitions and scans."""

    def maintain(self, queues: Sequence[str], limits: str = "{}", batch: int = 500) -> tuple[int, int, int]:
        """Reap expired leases into LOST, promote due scheduled jobs, and wake the jobs parked over their
        key's limit (``limits``: ``registry.limits_json()``) in lines due to be looked at whose key has
        room again; returns the three counts."""
        lost, promoted, woken = self.scripts.maintain(
            leases=self.keys.leases,
            lost=self.keys.lost,
            dying=self.keys.dying,
            queues_set=self.keys.queues_set,
            paused=self.keys.paused,
            queue=[self.keys.queue_keys(queue) for queue in queues],
            batch=batch,
            stamp=rq_timestamp(dt.datetime.now(dt.UTC)),  # RQ's meaning: when the job was put on its queue
            prefix=self.keys.job_prefix,
            keyed=_keyed(self.keys, limits),
            recheck=model.PARK_RECHECK,
            hold=model.TURN_HOLD,  # read at each call: a test shortens it
        )
        return int(lost), int(promoted), int(woken)

    def _due(self, key: str, older_than: float, limit: int) -> list[bytes]:
        return list(self.scripts.due(set=key, older_than=older_than, limit=limit))

    def lost_tokens(self, limit: int = 100) -> list[bytes]:
        """Lost attempts due to be settled, as raw bytes: whatever was planted, the scan never fails."""
        return self._due(self.keys.lost, 0, limit)

    def dying(self, older_than: float, limit: int = 100) -> list[bytes]:
        """Jobs stuck between "dead" and "row written" for longer than ``older_than`` seconds (raw ids)."""
        return self._due(self.keys.dying, older_than, limit)

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
        for member in self._due(self.keys.vanished, 0, limit):
            queue, _, job_id = text(member).partition("\n")
            found.append(VanishedId(member, queue, job_id))
        return found

    def forget_vanished(self, item: VanishedId) -> bool:
        """Drop an id whose dead letter exists; False if another runjobs already did."""
        return bool(self.connection.zrem(self.keys.vanished, item.member))

    def foreign_failures(self, queue: str, *, start: int = 0, limit: int = 100) -> list[str]:
        """Ids in RQ's failed registry of ``queue`` (jobs a foreign worker failed, or RQ's own), from
        the ``start``-th on."""
        failed = self.keys.failed(queue)
        members: list[bytes] = self.connection.zrange(failed, start, start + limit - 1)  # type: ignore[assignment]
        return [text(member) for member in members]

    def foreign_error(self, job_id: str) -> str:
        """The error RQ recorded for the job's last run (``exc_string`` of its results stream, which
        RQ compresses), or "" if it recorded none that can be read."""
        try:
            entries = self.connection.xrevrange(self.keys.results(job_id), count=1)
        except ResponseError:  # not a stream
            return ""
        raw = (entries[0][1] or {}).get(b"exc_string", b"") if entries else b""
        try:
            return zlib.decompress(base64.b64decode(raw)).decode(errors="replace")
        except (ValueError, zlib.error):
            return text(raw)

    def reclaim(
        self, queue: str, job_id: str, data: bytes, reason: str, exception: str, message: str
    ) -> bool:
        """Move a django_jobs job a foreign worker failed into dying, its payload restored; False if it
        is not one (any more)."""
        moved = self.scripts.reclaim(
            registry=self.keys.failed(queue), hash=self.keys.job(job_id), dying=self.keys.dying,
            id=job_id, data=data, reason=reason, exception=exception, message=message,
        )  # fmt: skip
        return bool(moved)

    def buried(self, job_id: str, ttl: int) -> None:
        self.settled(self.keys.dying, to_bytes(job_id), to_bytes(job_id), ttl)

    def settled(self, key: str, member: bytes, job_id: bytes, ttl: int, queue: str = "") -> None:
        """Drop a member of ``key`` whose dead letter is written; its job hash expires after ``ttl``."""
        wip = self.keys.wip(queue) if queue else None
        self.scripts.buried(
            holder=key, hash=self.keys.job_prefix.encode() + job_id, wip=wip, member=member, ttl=ttl
        )
