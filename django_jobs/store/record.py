"""A job as read from its Redis hash: :class:`JobRecord`, parsed once and tolerant of garbage.

The statuses and fields are named in :mod:`.lifecycle`; the Lua scripts get the statuses from
:class:`Status` when they load.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django_jobs.store.lifecycle import F
from django_jobs.store.lifecycle import Status as Status  # re-exported: its home before the table

#: What a job id may be: RQ's own rule (letters, digits, ``_`` and ``-``; rq.job.JOB_ID_PATTERN), at
#: most 64 characters, the width of every job id column. Every id django_jobs makes is a UUIDv7 hex.
JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def valid_job_id(value: str) -> bool:
    return JOB_ID.fullmatch(value) is not None


def new_job_id() -> str:
    """A new job's id: a UUIDv7 (RFC 9562) as 32 hex digits, as a uuid4's are, with 74 random bits.
    Its first 48 bits are the Unix time in milliseconds, so ids made later sort later: each database
    index on job ids (the outbox's key, the history's, the dead letters') grows at one end instead of
    at a random leaf, so a write touches the pages the last one did, however big the table is."""
    rand = int.from_bytes(os.urandom(10), "big")
    value = (
        (time.time_ns() // 1_000_000) << 80  # unix_ts_ms
        | 0x7 << 76  # version
        | (rand >> 62 & 0xFFF) << 64  # rand_a
        | 0b10 << 62  # variant
        | rand & ((1 << 62) - 1)  # rand_b
    )
    return f"{value:032x}"


def surrogate_id(raw: bytes) -> str:
    """A valid, stable id standing in for one that breaks :data:`JOB_ID`: the same raw id always gets
    the same surrogate, so its dead letter is written once however often it is found."""
    return "unreadable-" + hashlib.sha256(raw).hexdigest()[:32]


def to_text(raw: bytes) -> str:
    """Bytes from Redis as text that never raises; :func:`to_bytes` gives the same bytes back."""
    return raw.decode("utf-8", "surrogateescape")


def to_bytes(text: str) -> bytes:
    """The bytes a :func:`to_text` string came from (other lone surrogates are kept as they are)."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def text(value: bytes | str) -> str:
    """A value from Redis as readable text (undecodable bytes replaced): for display and names."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def rq_timestamp(when: dt.datetime) -> str:
    """RQ's own timestamp format (``%Y-%m-%dT%H:%M:%S.%fZ``, UTC), so its tools parse our fields;
    written on every claim, so by ``isoformat``, in a third of ``strftime``'s time."""
    return when.astimezone(dt.UTC).isoformat(timespec="microseconds")[:26] + "Z"


def parse_rq_timestamp(value: bytes | str | None) -> dt.datetime | None:
    """An aware UTC time from RQ's format; None for a missing or unreadable value."""
    if value is None:
        return None
    raw = text(value)
    if len(raw) != len("2000-01-01T00:00:00.000000Z") or not raw.endswith("Z"):
        return None
    try:  # fromisoformat reads RQ's format fifty times faster than strptime, on every claim
        return dt.datetime.fromisoformat(raw)
    except ValueError:
        return None


def split_token(token: str) -> str:
    """The job id inside a lease token ``<id>:<nonce>``."""
    return token.rpartition(":")[0]


def int_field(fields: Mapping[str, bytes], name: str, default: int) -> int:
    """A numeric job-hash field, tolerating garbage (a corrupt hash must not crash the worker)."""
    try:
        return int(float(fields[name]))
    except (KeyError, ValueError, TypeError, OverflowError):
        return default


def parse_history(raw: bytes | None) -> list[Any]:
    """The attempt history (``dj_history``): a JSON list, or empty when missing or garbage."""
    try:
        history = json.loads(raw or b"[]")
    except (ValueError, RecursionError):  # garbage in a job's own field must not stop its settling
        return []
    return history if isinstance(history, list) else []


@dataclass(frozen=True)
class JobRecord:
    """One job hash, read once. Never raises on garbage: ``readable`` is False with the ``problem``.

    ``fields`` keeps the raw bytes (field names as :func:`to_text` strings) for snapshots.
    """

    id: str
    fields: dict[str, bytes] = field(default_factory=dict)
    problem: str = ""

    @classmethod
    def unreadable(cls, job_id: str, problem: str) -> JobRecord:
        """A key that is not a job hash at all (Redis said why)."""
        return cls(job_id, {}, problem)

    @property
    def readable(self) -> bool:
        return not self.problem

    @property
    def exists(self) -> bool:
        """False for a hash that is gone (evicted or deleted) or not a hash."""
        return bool(self.fields)

    @property
    def snapshot(self) -> dict[str, bytes]:
        """The raw hash for a dead letter's snapshot; for a key that is not a hash, what Redis said."""
        if self.readable:
            return dict(self.fields)
        return {F.ORIGIN: b"", "redis_error": self.problem.encode()}

    def text(self, name: str, default: str = "") -> str:
        value = self.fields.get(name)
        return default if value is None else text(value)

    @property
    def name(self) -> str:
        """The job's name (RQ's ``description``)."""
        return self.text(F.DESCRIPTION)

    @property
    def queue(self) -> str:
        """The queue it was enqueued on (RQ's ``origin``)."""
        return self.text(F.ORIGIN)

    @property
    def status(self) -> Status | None:
        try:
            return Status(self.text(F.STATUS))
        except ValueError:
            return None

    @property
    def attempt(self) -> int:
        """Attempts counted so far (the claim counts each one when it starts)."""
        return int_field(self.fields, F.ATTEMPT, 0)

    @property
    def snoozes(self) -> int:
        """How often the job snoozed so far (each snooze gave its attempt back)."""
        return int_field(self.fields, F.SNOOZES, 0)

    @property
    def expires(self) -> dt.datetime | None:
        """When a job that has not started by then is dropped unrun; None if it never expires (or garbage)."""
        try:
            return dt.datetime.fromtimestamp(float(self.fields[F.EXPIRES]), dt.UTC)
        except (KeyError, ValueError, OverflowError, OSError):
            return None

    @property
    def expired(self) -> bool:
        """Whether the claim dropped it unrun because it expired before it started."""
        return F.EXPIRED in self.fields

    @property
    def worker(self) -> str:
        return self.text(F.WORKER_NAME)

    @property
    def cron_run(self) -> str:
        return self.text(F.CRON)

    @property
    def data(self) -> bytes:
        return self.fields.get(F.DATA, b"")

    @property
    def trace(self) -> bytes:
        """The enqueuer's trace context (``tracing.carrier()``), empty when it had none."""
        return self.fields.get(F.TRACE, b"")

    @property
    def history(self) -> list[Any]:
        return parse_history(self.fields.get(F.HISTORY))

    def time(self, name: str) -> dt.datetime | None:
        """One of ``created_at``, ``enqueued_at``, ``started_at``, ``ended_at``; None if unreadable."""
        return parse_rq_timestamp(self.fields.get(name))
