"""The read model of one job: which :class:`~.lifecycle.State` it is in and what holds it there.

Every reader (``results.get_job``, the admin's job page, ``inspect``) asks here instead of testing the
hash's flags its own way. Two pipelined round trips for any number of ids: the hashes and the paused
hash, then one look per id where its hash says it should be (a running job's token is found by a
ZSCAN of the leases and the lost set, which may take one more trip per page past the first). Never
writes, never raises on garbage: a key of the wrong type reads as missing.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.exceptions import ResponseError

from django_jobs.store import keys
from django_jobs.store import lifecycle as lc
from django_jobs.store.interface import Packer
from django_jobs.store.keys import Keyspace
from django_jobs.store.lifecycle import F, State, Status
from django_jobs.store.model import Pause
from django_jobs.store.record import JobRecord, int_field, split_token, text, to_text
from django_jobs.store.scripts import INTERFACES, Part

#: Ids of a queue's list compared when looking for a ready job's place (LPOS MAXLEN): past them, the
#: job is known to wait in the list but not how many are ahead of it.
LIST_LOOK = 10_000
#: Members a ZSCAN page asks for when looking for a running job's lease token.
SCAN_PAGE = 1000
#: Job ids whose statuses one script call reads (a call holds Redis for about a microsecond per id).
STATUS_BATCH = 1000


@dataclass(frozen=True)
class Where:
    """One job's state and what holds it. ``state`` None: Redis holds no trace of it."""

    id: str
    state: State | None
    record: JobRecord
    key: str = ""  # the key of the structure holding it ("" for an ended job, or none found)
    due: float | None = None  # a scheduled job's due time (Unix time, Redis clock)
    priority: int = 0
    pause: Pause | None = None  # the pause holding a ready or parked job
    line: str = ""  # the scope of its key's line (in it, or holding its turn)
    ahead: int | None = None  # ids before it where it waits, when known
    token: str = ""  # a running or lost attempt's lease token
    lease_expires: float | None = None  # a running attempt's lease expiry (Unix time)
    worker: str = ""

    @property
    def paused(self) -> bool:
        """Waiting for a pause to be lifted: its queue or type is paused, or a paused type parked it (a
        job of a key in its key's line)."""
        held = self.state is State.IN_LINE and self.pause is not None
        return held or self.state in (State.HELD, State.PARKED)

    @property
    def in_line(self) -> bool:
        """Waiting for its key's turn, or holding the turn it was given (``limit_key``)."""
        return bool(self.line) and self.record.status is Status.QUEUED


@functools.cache
def _statuses_packer() -> Packer:
    return INTERFACES["statuses"].packer()


def _ok(reply: Any) -> Any:
    """A reply, or None for an error reply (a key of the wrong type)."""
    return None if isinstance(reply, Exception) else reply


def _score(reply: Any) -> float | None:
    reply = _ok(reply)
    try:
        return float(reply) if reply is not None else None
    except (TypeError, ValueError):
        return None


def _record(job_id: str, reply: Any) -> JobRecord:
    if isinstance(reply, Exception):
        return JobRecord.unreadable(job_id, str(reply))
    return JobRecord(job_id, {to_text(k): v for k, v in (reply or {}).items()})


def pauses_of(raw: Any) -> dict[str, Pause]:
    """The paused hash's pauses by field; garbage reads as no pause."""
    found = {}
    for field, value in (_ok(raw) or {}).items():
        pause = Pause.parse(field, value)
        if pause is not None:
            found[keys.pause_field(pause.kind, pause.name)] = pause
    return found


class _Look:
    """The second round trip for one job: the commands its hash calls for, then what they found."""

    def __init__(self, record: JobRecord, pauses: Mapping[str, Pause], space: Keyspace) -> None:
        self.record = record
        self.pauses = pauses
        self.space = space
        self.reads: list[Callable[[Any], None]] = []
        self.where: dict[str, Any] = {}

    def plan(self, pipe: Any) -> None:
        record, queue = self.record, self.record.queue
        status = record.status
        self.where["priority"] = int_field(record.fields, F.PRIORITY, 0)
        self.where["worker"] = record.worker
        if status is Status.SCHEDULED:
            self._ask(pipe.zscore(self.space.scheduled(queue), record.id), self._scheduled)
        elif status is Status.QUEUED:
            self._queued(pipe)
        elif status is Status.STARTED:
            self._scan(pipe, self.space.leases, 0)
            self._scan(pipe, self.space.lost, 0)
        if status is None or status is Status.FAILED:
            self._ask(pipe.zscore(self.space.dying, record.id), self._dying)
        if status is Status.FAILED:
            self._ask(pipe.zscore(self.space.failed(queue), record.id), self._foreign)

    def _ask(self, _: Any, read: Callable[[Any], None]) -> None:
        self.reads.append(read)

    def _queued(self, pipe: Any) -> None:
        record, queue = self.record, self.record.queue
        parked, line = record.text(F.PARKED), record.text(F.LINE)
        self.where["line"] = line
        if parked:
            key = self.space.parked(queue, parked)
            self.where.update(
                key=key, state=State.PARKED, pause=self.pauses.get(keys.pause_field("job", parked))
            )
            self._ask(pipe.lpos(key, record.id), self._position)
            return
        if line:
            key = self.space.parked_line(queue, line)
            self._ask(pipe.zrank(key, record.id), lambda rank: self._in_line(key, rank))
        high, low = self.space.priority(queue)
        self._ask(pipe.zrank(high, record.id), lambda rank: self._ready(high, rank))
        self._ask(pipe.zrank(low, record.id), lambda rank: self._ready(low, rank))
        list_key = self.space.queue(queue)
        self._ask(pipe.lpos(list_key, record.id, maxlen=LIST_LOOK), lambda at: self._ready(list_key, at))

    def _position(self, at: Any) -> None:
        self.where["ahead"] = _ok(at)

    def _in_line(self, key: str, rank: Any) -> None:
        if _ok(rank) is not None:
            self.where.update(key=key, state=State.IN_LINE, ahead=rank)
            pause = self._pause()
            if pause is not None:  # it waits for the pause to be lifted as well
                self.where["pause"] = pause

    def _pause(self) -> Pause | None:
        """The pause of its queue or of its job type, if either is paused."""
        record = self.record
        fields = [keys.pause_field("queue", record.queue), keys.pause_field("job", record.name)]
        return next((self.pauses[f] for f in fields if f in self.pauses), None)

    def _ready(self, key: str, at: Any) -> None:
        if _ok(at) is not None and "state" not in self.where:
            self.where.update(key=key, state=State.WAITING, ahead=at)

    def _scheduled(self, score: Any) -> None:
        due = _score(score)
        if due is not None:
            state = lc.scheduled_state(self.record.fields)
            self.where.update(key=self.space.scheduled(self.record.queue), state=state, due=due)

    def _dying(self, score: Any) -> None:
        if _score(score) is not None:
            self.where.update(key=self.space.dying, state=State.DYING)

    def _foreign(self, score: Any) -> None:
        if _score(score) is not None:
            self.where.update(key=self.space.failed(self.record.queue), state=State.FOREIGN)

    def _scan(self, pipe: Any, key: str, cursor: int) -> None:
        pipe.zscan(key, cursor, match=f"{self.record.id}:*", count=SCAN_PAGE)
        self.reads.append(lambda reply: self._scanned(key, reply))

    def _scanned(self, key: str, reply: Any) -> None:
        cursor, members = _ok(reply) or (0, [])
        for member, score in members:
            token = text(member)
            if split_token(token) == self.record.id:
                running = key == self.space.leases
                state = State.RUNNING if running else State.LOST
                self.where.update(key=key, state=state, token=token, lease_expires=score if running else None)
        if cursor and "token" not in self.where:
            self.where.setdefault("_more", []).append((key, cursor))

    def finish(self, replies: Iterable[Any]) -> None:
        for read, reply in zip(self.reads, replies, strict=True):
            read(reply)
        self.reads = []

    def more(self, pipe: Any) -> bool:
        """Plan the next ZSCAN pages of a token not found yet; False when there is nothing left to ask."""
        pending = self.where.pop("_more", [])
        for key, cursor in pending:
            self._scan(pipe, key, cursor)
        return bool(pending)

    def result(self) -> Where:
        record, where = self.record, self.where
        state = where.pop("state", None)
        status = record.status
        if state is None and status in lc.ENDED:
            state = lc.ended_state(status, record.fields)
        if state is None and status is Status.QUEUED and not where.get("line"):
            state = State.WAITING  # past LIST_LOOK in its list, or gone from it: the audit tells which
        if state is State.WAITING:
            state = self._ready_state(where)
        return Where(record.id, state, record, **where)

    def _ready_state(self, where: dict[str, Any]) -> State:
        """Which ready state a job found in its queue's list or priority sets is in."""
        pause = self._pause()
        if pause is not None:
            where["pause"] = pause
            return State.HELD
        if F.LINE in self.record.fields:
            return State.TURN
        prioritized = where.get("key", "").startswith(self.space.prefix(lc.HIGH))
        return State.WAITING_PRIORITY if prioritized else State.WAITING


def locate(store: Part, job_ids: Sequence[str], queues: Sequence[str] = ()) -> dict[str, Where]:
    """Where each of ``job_ids`` of ``store``'s namespace is. An id whose hash is gone is looked for
    among the vanished ids of ``queues`` (no hash names its queue)."""
    connection, space = store.connection, store.keys
    with connection.pipeline(transaction=False) as pipe:
        for job_id in job_ids:
            pipe.hgetall(space.job(job_id))
        pipe.hgetall(space.paused)
        *hashes, raw_pauses = pipe.execute(raise_on_error=False)
    pauses = pauses_of(raw_pauses)
    looks = [_Look(_record(job_id, raw), pauses, space) for job_id, raw in zip(job_ids, hashes, strict=True)]
    gone = [look for look in looks if look.record.readable and not look.record.exists]
    pending = [look for look in looks if look.record.exists]
    with connection.pipeline(transaction=False) as pipe:
        for look in pending:
            look.plan(pipe)
        for look in gone:
            for queue in queues:
                member = f"{queue}\n{look.record.id}"
                look._ask(pipe.zscore(space.vanished, member), functools.partial(_vanished, look))
        replies = iter(pipe.execute(raise_on_error=False))
    for look in pending + gone:
        look.finish([next(replies) for _ in look.reads])
    while pending:
        with connection.pipeline(transaction=False) as pipe:
            pending = [look for look in pending if look.more(pipe)]
            replies = iter(pipe.execute(raise_on_error=False)) if pending else iter(())
        for look in pending:
            look.finish([next(replies) for _ in look.reads])
    return {look.record.id: look.result() for look in looks}


def _vanished(look: _Look, score: Any) -> None:
    if _score(score) is not None:
        look.where.update(key=look.space.vanished, state=State.VANISHED)


def ended(record: JobRecord) -> State | None:
    """The state of a job whose record says it ended; None for one that did not (only a look at the
    structures can tell where it waits or runs)."""
    status = record.status
    return lc.ended_state(status, record.fields) if status in lc.ENDED else None


def where(store: Part, job_id: str, queues: Sequence[str] = ()) -> Where:
    """:func:`locate` of one id."""
    return locate(store, [job_id], queues)[job_id]


@dataclass(frozen=True)
class Worker:
    """A live worker record (its hash expires with its heartbeat): a runjobs work process's, or a
    foreign worker's (an rqworker's, see :func:`.lifecycle.foreign_worker`), which fails our jobs."""

    name: str
    queues: tuple[str, ...]
    pid: str
    hostname: str
    foreign: bool


def workers(connection: Redis) -> list[Worker]:
    """Every live worker of the workers' set, in name order: two round trips, O(workers)."""
    names = sorted(text(name) for name in connection.smembers(keys.WORKERS_SET))
    with connection.pipeline(transaction=False) as pipe:
        for name in names:
            pipe.hgetall(name)
        replies = pipe.execute(raise_on_error=False)
    found = []
    for name, record in zip(names, replies, strict=True):
        if isinstance(record, dict) and b"queues" in record:  # else its record expired: it is dead
            found.append(
                Worker(
                    name=name.removeprefix(keys.WORKER_PREFIX),
                    queues=tuple(text(record[b"queues"]).split(",")),
                    pid=text(record.get(b"pid", b"")),
                    hostname=text(record.get(b"hostname", b"")),
                    foreign=lc.foreign_worker(record),
                )
            )
    return found


def serving(connection: Redis, queue: str) -> int:
    """How many live runjobs work processes serve ``queue`` (a foreign worker does not count)."""
    return sum(1 for worker in workers(connection) if queue in worker.queues and not worker.foreign)


def foreign_workers(connection: Redis, queues: Sequence[str]) -> list[Worker]:
    """The live foreign workers registered on any of ``queues``."""
    return [w for w in workers(connection) if w.foreign and set(w.queues) & set(queues)]


class Reads(Part):
    """The store's raw reads, that change nothing: a job's hash and status, when a scheduled job is
    due, what is paused and parked, and what a work process reads once a second for its claims."""

    def statuses(self, job_ids: Sequence[str]) -> dict[str, str | None]:
        """Each job's status field, None where its hash is gone ("" where the key is not a hash):
        one script call per ``STATUS_BATCH`` ids (a pipeline of as many HGETs costs the client
        several times more), O(ids)."""
        pack = _statuses_packer()
        found: dict[str, str | None] = {}
        for start in range(0, len(job_ids), STATUS_BATCH):
            chunk = job_ids[start : start + STATUS_BATCH]
            replies = self.scripts.statuses.script(*pack(job=[self.keys.job(job_id) for job_id in chunk]))
            found.update(
                (job_id, None if status is None else text(status))
                for job_id, status in zip(chunk, replies, strict=True)
            )
        return found

    def pauses(self) -> list[Pause]:
        """Every pause on this server: one HGETALL of a small hash."""
        return _pauses(self.connection.hgetall(self.keys.paused))  # type: ignore[arg-type]

    def parked_lists(self) -> list[tuple[str, str]]:
        """(queue, job type) of each parked list that may hold jobs; garbage members are skipped."""
        return parked_pairs(self.connection.smembers(self.keys.parked_lists))  # type: ignore[arg-type]

    def held(self, record: JobRecord) -> bool:
        """Whether a queued job waits for a pause to be lifted: it is parked, or its queue or its job
        type (by the name it was queued under) is paused. One round trip unless it is parked."""
        if F.PARKED in record.fields:
            return True
        fields = [keys.pause_field("queue", record.queue), keys.pause_field("job", record.name)]
        try:
            return any(value is not None for value in self.connection.hmget(self.keys.paused, fields))
        except ResponseError:  # the paused hash is garbage (runjobs moves it aside): nothing it says
            return False

    def claim_state(self, queues: Sequence[str]) -> tuple[list[Pause], set[str]]:
        """What a work process reads once a second for its claims, in one round trip: :meth:`pauses`,
        and which of ``queues`` have jobs in their high-priority set."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.paused)
            for queue in queues:
                pipe.exists(self.keys.priority(queue)[0])
            raw, *found = pipe.execute()
        return _pauses(raw), {queue for queue, n in zip(queues, found, strict=True) if n}

    def pause_state(self) -> tuple[list[Pause], list[tuple[str, str]]]:
        """:meth:`pauses` and :meth:`parked_lists` in one round trip."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.paused)
            pipe.smembers(self.keys.parked_lists)
            raw, members = pipe.execute()
        return _pauses(raw), parked_pairs(members)

    def cancel_requested(self, job_id: str) -> bool:
        """Whether the job's cancel was requested (it may be running still)."""
        return bool(self.connection.hexists(self.keys.job(job_id), F.CANCEL))

    def record(self, job_id: str | bytes) -> JobRecord:
        """The job's record, read once; a key that is not a hash gives an unreadable record."""
        name = job_id if isinstance(job_id, str) else to_text(job_id)
        try:
            return JobRecord(name, self.job_fields(job_id))
        except ResponseError as exc:  # not a hash: keep what Redis says about it
            return JobRecord.unreadable(name, str(exc))

    def due_at(self, job_id: str, queue: str) -> float | None:
        """When a scheduled job (a retry, a delayed or a limit-deferred job) is due, Unix time."""
        score = self.connection.zscore(self.keys.scheduled(queue), job_id)
        return float(score) if score is not None else None

    def job_fields(self, job_id: str | bytes) -> dict[str, bytes]:
        """The job hash; field names that are not UTF-8 come back as :func:`to_text` strings."""
        key = self.keys.job_prefix.encode() + job_id if isinstance(job_id, bytes) else self.keys.job(job_id)
        raw: dict[bytes, bytes] = self.connection.hgetall(key)  # type: ignore[assignment]
        return {to_text(k): v for k, v in raw.items()}

    def next_due(self, queues: Sequence[str]) -> float | None:
        """Seconds (in Redis time) until the first scheduled job of these queues is due, or a line of
        jobs parked over their key's limit is looked at next; None if none."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            for queue in queues:
                pipe.zrange(self.keys.scheduled(queue), 0, 0, withscores=True)
                pipe.zrange(self.keys.parked_index(queue), 0, 0, withscores=True)
            (now_s, now_us), *firsts = pipe.execute()
        dues = [float(first[0][1]) for first in firsts if first]
        return min(dues) - (now_s + now_us / 1e6) if dues else None


def _pauses(raw: dict[bytes, bytes]) -> list[Pause]:
    return sorted(pauses_of(raw).values(), key=lambda p: (p.kind, p.name))


def parked_pairs(members: Iterable[bytes]) -> list[tuple[str, str]]:
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
