"""The store's raw reads: a job's hash and status, when a scheduled job is due, what is paused and
parked, and what a work process reads once a second for its claims."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from redis.exceptions import ResponseError

from . import keys
from .model import Pause
from .record import JobRecord, text, to_text
from .scripts import Part


class Reads(Part):
    """Reads of the store that change nothing."""

    def statuses(self, job_ids: Sequence[str]) -> dict[str, str | None]:
        """Each job's status field, None where its hash is gone ("" where the key is not a hash):
        one round trip, O(ids)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                pipe.hget(keys.job_key(job_id), "status")
            found = pipe.execute(raise_on_error=False)
        return {
            job_id: "" if isinstance(status, Exception) else None if status is None else text(status)
            for job_id, status in zip(job_ids, found, strict=True)
        }

    def pauses(self) -> list[Pause]:
        """Every pause on this server: one HGETALL of a small hash."""
        return _pauses(self.connection.hgetall(keys.PAUSED))  # type: ignore[arg-type]

    def parked_lists(self) -> list[tuple[str, str]]:
        """(queue, job type) of each parked list that may hold jobs; garbage members are skipped."""
        return _parked(self.connection.smembers(keys.PARKED))  # type: ignore[arg-type]

    def held(self, record: JobRecord) -> bool:
        """Whether a queued job waits for a pause to be lifted: it is parked, or its queue or its job
        type (by the name it was queued under) is paused. One round trip unless it is parked."""
        if "dj_parked" in record.fields:
            return True
        fields = [keys.pause_field("queue", record.queue), keys.pause_field("job", record.name)]
        try:
            return any(value is not None for value in self.connection.hmget(keys.PAUSED, fields))
        except ResponseError:  # the paused hash is garbage (runjobs moves it aside): nothing it says
            return False

    def claim_state(self, queues: Sequence[str]) -> tuple[list[Pause], set[str]]:
        """What a work process reads once a second for its claims, in one round trip: :meth:`pauses`,
        and which of ``queues`` have jobs in their high-priority set."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PAUSED)
            for queue in queues:
                pipe.exists(keys.priority_keys(queue)[0])
            raw, *found = pipe.execute()
        return _pauses(raw), {queue for queue, n in zip(queues, found, strict=True) if n}

    def pause_state(self) -> tuple[list[Pause], list[tuple[str, str]]]:
        """:meth:`pauses` and :meth:`parked_lists` in one round trip."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.PAUSED)
            pipe.smembers(keys.PARKED)
            raw, members = pipe.execute()
        return _pauses(raw), _parked(members)

    def cancel_requested(self, job_id: str) -> bool:
        """Whether the job's cancel was requested (it may be running still)."""
        return bool(self.connection.hexists(keys.job_key(job_id), "dj_cancel"))

    def record(self, job_id: str | bytes) -> JobRecord:
        """The job's record, read once; a key that is not a hash gives an unreadable record."""
        name = job_id if isinstance(job_id, str) else to_text(job_id)
        try:
            return JobRecord(name, self.job_fields(job_id))
        except ResponseError as exc:  # not a hash: keep what Redis says about it
            return JobRecord.unreadable(name, str(exc))

    def due_at(self, job_id: str, queue: str) -> float | None:
        """When a scheduled job (a retry, a delayed or a limit-deferred job) is due, Unix time."""
        score = self.connection.zscore(keys.scheduled_key(queue), job_id)
        return float(score) if score is not None else None

    def job_fields(self, job_id: str | bytes) -> dict[str, bytes]:
        """The job hash; field names that are not UTF-8 come back as :func:`to_text` strings."""
        key = keys.JOB_PREFIX.encode() + job_id if isinstance(job_id, bytes) else keys.job_key(job_id)
        raw: dict[bytes, bytes] = self.connection.hgetall(key)  # type: ignore[assignment]
        return {to_text(k): v for k, v in raw.items()}

    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds (in Redis time) until the first scheduled job of these queues is due, or a line of
        jobs parked over their key's limit is looked at next; None if none."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            for queue in queues:
                pipe.zrange(keys.scheduled_key(queue), 0, 0, withscores=True)
                pipe.zrange(keys.parked_index(queue), 0, 0, withscores=True)
            (now_s, now_us), *firsts = pipe.execute()
        dues = [float(first[0][1]) for first in firsts if first]
        return min(dues) - (now_s + now_us / 1e6) if dues else None


def _pauses(raw: dict[bytes, bytes]) -> list[Pause]:
    found = (Pause.parse(field, value) for field, value in raw.items())
    return sorted((p for p in found if p is not None), key=lambda p: (p.kind, p.name))


def _parked(members: Iterable[bytes]) -> list[tuple[str, str]]:
    """The members of the set of parked lists (JSON ``[queue, name]``, written by the claim script)
    as pairs, sorted; a member that is not one is skipped."""
    found = []
    for member in members:
        try:
            queue, name = json.loads(member)
        except (ValueError, TypeError):
            continue
        if isinstance(queue, str) and isinstance(name, str):
            found.append((queue, name))
    return sorted(found)
