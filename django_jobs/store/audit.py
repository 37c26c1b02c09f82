"""The auditor: does what Redis holds agree with the lifecycle table (:mod:`.lifecycle`)?

Read-only and bounded: structures are read in pages (LRANGE / ZRANGE of ``PAGE`` members, SCAN with
COUNT), pipelined, and ``budget`` caps how many members and keys it looks at; :attr:`Audit.complete`
says whether it saw everything. It is not one atomic read: on a live server a job moving between two
reads can show as a problem that is not one; audit a quiet server (or read twice) before acting.

What it checks (each :class:`Problem` kind):

* ``two_places``: an id held by more than one state structure (or twice by one);
* ``no_hash``: an id in a structure whose state needs a hash (all but dying and vanished);
* ``status``: a hash whose status is not the one its structure's state carries; ``queue``: an id
  held in the structures of a queue other than its hash's ``origin``;
* ``nowhere``: a hash whose status says it waits or runs that no structure holds (looked for only
  when every structure was read);
* ``lease_without_wip`` / ``wip_without_lease``: a lease or lost token missing from its queue's wip
  set, or a wip token that holds no lease and is not lost;
* ``dead_slot``: a key's slot held by a token that has no lease and is not lost, or by a live hold of
  a job that does not wait holding its key's turn;
* ``line_flag``: a job in a key's line whose ``dj_line``/``dj_turn`` disagree, or a queued job whose
  ``dj_line`` names a line it is neither in nor holds the turn of; ``line_index``: a key's line that
  holds jobs but is missing from its queue's index (maintenance would never wake it);
* ``parked_flag``: a job in a parked list whose ``dj_parked`` does not name its type, or a queued job
  with ``dj_parked`` in no parked list; ``parked_index``: a parked list holding jobs that the set of
  parked lists does not name (no resume would find it);
* ``wrong_type``: a structure key of the wrong Redis type (its contents are not looked at).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from redis import Redis
from redis.exceptions import ResponseError

from django_jobs.store import lifecycle as lc
from django_jobs.store.lifecycle import F, Status, Structure
from django_jobs.store.read import parked_pairs
from django_jobs.store.record import split_token, text
from django_jobs.store.scripts import Part

#: Members per LRANGE / ZRANGE page, and the COUNT of a SCAN step.
PAGE = 1000
#: Members and keys an audit looks at, unless told otherwise.
BUDGET = 200_000
#: The hash fields the checks read (never the payload).
_FIELDS = (F.STATUS, F.ORIGIN, F.PARKED, F.LINE, F.TURN)


@dataclass(frozen=True)
class Problem:
    kind: str
    job_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} {self.job_id or '-'}: {self.detail}"


@dataclass
class Audit:
    problems: list[Problem] = field(default_factory=list)
    complete: bool = True  # False: the budget ran out before it looked at everything
    looked: int = 0  # members and keys looked at

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _Held:
    """One id (or token) found in one structure."""

    structure: Structure
    key: str
    queue: str  # the queue whose structure it is ("" for a global one)
    score: float | None
    extra: str = ""  # the line's scope, the parked list's type, the lease token


class _Reader:
    """Paged, budgeted, pipelined reads; a key of the wrong type is noted and read as empty."""

    def __init__(self, store: Part, budget: int, result: Audit) -> None:
        self.connection, self.space = store.home(), store.keys  # every key of a namespace is there
        self.budget, self.result = budget, result

    def spend(self, n: int) -> bool:
        self.result.looked += n
        if self.result.looked > self.budget:
            self.result.complete = False
        return self.result.complete

    def members(self, key: str, kind: lc.Kind) -> list[tuple[bytes, float | None]]:
        """Every member of a list or sorted set (with its score), page by page within the budget."""
        found: list[tuple[bytes, float | None]] = []
        start = 0
        while self.result.complete:
            try:
                if kind is lc.Kind.LIST:
                    items: list[bytes] = self.connection.lrange(key, start, start + PAGE - 1)  # type: ignore[assignment]
                    page: list[tuple[bytes, float | None]] = [(m, None) for m in items]
                else:
                    page = self.connection.zrange(key, start, start + PAGE - 1, withscores=True)  # type: ignore[assignment]
            except ResponseError as exc:  # a key of the wrong type
                self.result.problems.append(Problem("wrong_type", "", f"{key!r}: {exc}"))
                return []
            found += page
            start += PAGE
            if not self.spend(len(page)) or len(page) < PAGE:
                break
        return found

    def scan(self, match: str) -> list[str]:
        """The keys matching ``match``, by SCAN within the budget."""
        found, cursor = [], 0
        while True:
            cursor, page = self.connection.scan(cursor, match=match, count=PAGE)
            found += [text(k) for k in page]
            if not self.spend(PAGE) or not cursor:
                return found


def audit(store: Part, queues: Sequence[str] | None = None, *, budget: int = BUDGET) -> Audit:
    """Check one namespace of a Redis server against the lifecycle table (``queues``: None for every
    queue it names)."""
    result = Audit()
    reader = _Reader(store, budget, result)
    connection, space = reader.connection, store.keys
    names = list(queues) if queues is not None else _queues(reader)
    held: dict[str, list[_Held]] = {}
    tokens: dict[str, list[_Held]] = {}  # wip, leases, lost: by token
    for queue in names:
        _read_queue(reader, queue, held, tokens)
    for structure in (lc.LEASES, lc.LOST):
        key = space.name(structure)
        for member, score in reader.members(key, lc.Kind.ZSET):
            token = text(member)
            place = _Held(structure, key, "", score, token)
            tokens.setdefault(token, []).append(place)
            held.setdefault(split_token(token), []).append(place)
    for member, score in reader.members(space.dying, lc.Kind.ZSET):
        held.setdefault(text(member), []).append(_Held(lc.DYING, space.dying, "", score))
    for member, score in reader.members(space.vanished, lc.Kind.ZSET):
        queue, _, job_id = text(member).partition("\n")
        held.setdefault(job_id, []).append(_Held(lc.VANISHED, space.vanished, queue, score))
    parked_lists = _read_parked(reader, names, held)
    djkeys = reader.scan(space.prefix(lc.SLOTS).partition(":")[0] + ":*") if result.complete else []
    hashes = _hashes(reader, held)
    now = _now(connection)
    problems = result.problems
    problems += _holders(held, hashes)
    problems += _tokens(tokens, hashes, set(names))
    problems += _slots(reader, djkeys, tokens, held, hashes, now)
    problems += _indexes(reader, djkeys, names, parked_lists)
    if result.complete:
        problems += _nowhere(reader, held, set(names))
    return result


def _queues(reader: _Reader) -> list[str]:
    """The queues this namespace names: RQ's set of queue keys, and the queues of the parked lists."""
    found = set()
    space = reader.space
    with contextlib.suppress(ResponseError):  # a set of the wrong type names no queue
        found |= {text(k).removeprefix(space.queue_prefix) for k in _set(reader.connection, space.queues_set)}
    found |= {queue for queue, _ in _parked_set(reader)}
    return sorted(found)


def _set(connection: Redis, key: str) -> set[bytes]:
    return connection.smembers(key)  # type: ignore[return-value]


def _parked_set(reader: _Reader) -> list[tuple[str, str]]:
    try:
        return parked_pairs(_set(reader.connection, reader.space.parked_lists))
    except ResponseError:  # a set of the wrong type names no parked list
        return []


def _read_queue(
    reader: _Reader, queue: str, held: dict[str, list[_Held]], tokens: dict[str, list[_Held]]
) -> None:
    layout = reader.space.layout(queue)
    for structure, key in (
        (lc.QUEUE, layout.list),
        (lc.HIGH, layout.high),
        (lc.LOW, layout.low),
        (lc.SCHEDULED, layout.scheduled),
        (lc.RQ_FAILED, reader.space.failed(queue)),
    ):
        for member, score in reader.members(key, structure.kind):
            held.setdefault(text(member), []).append(_Held(structure, key, queue, score))
    for member, score in reader.members(layout.wip, lc.Kind.ZSET):
        tokens.setdefault(text(member), []).append(_Held(lc.WIP, layout.wip, queue, score, text(member)))
    for scope, _ in reader.members(layout.lines, lc.Kind.ZSET):
        _read_line(reader, queue, text(scope), held)


def _read_line(reader: _Reader, queue: str, scope: str, held: dict[str, list[_Held]]) -> None:
    key = reader.space.parked_line(queue, scope)
    for member, score in reader.members(key, lc.Kind.ZSET):
        held.setdefault(text(member), []).append(_Held(lc.LINE, key, queue, score, scope))


def _read_parked(reader: _Reader, names: Sequence[str], held: dict[str, list[_Held]]) -> set[str]:
    """The parked lists the set names, read; returns their keys."""
    listed = set()
    for queue, name in _parked_set(reader):
        key = reader.space.parked(queue, name)
        listed.add(key)
        for member, _ in reader.members(key, lc.Kind.LIST):
            held.setdefault(text(member), []).append(_Held(lc.PARKED, key, queue, None, name))
    return listed


def _hashes(reader: _Reader, ids: Iterable[str]) -> dict[str, dict[str, str] | None]:
    """The checked fields of each id's hash; None where there is no hash (or the key is not one)."""
    ids, connection = list(ids), reader.connection
    found: dict[str, dict[str, str] | None] = {}
    for start in range(0, len(ids), PAGE):
        chunk = ids[start : start + PAGE]
        with connection.pipeline(transaction=False) as pipe:
            for job_id in chunk:
                pipe.hmget(reader.space.job(job_id), list(_FIELDS))
            replies = pipe.execute(raise_on_error=False)
        for job_id, reply in zip(chunk, replies, strict=True):
            if isinstance(reply, Exception) or all(v is None for v in reply):
                found[job_id] = None
            else:
                found[job_id] = {
                    name: text(v) for name, v in zip(_FIELDS, reply, strict=True) if v is not None
                }
    return found


def _now(connection: Redis) -> float:
    seconds, micros = connection.time()
    return float(seconds) + micros / 1e6


#: The status each holding structure's state carries (None: any).
_STATUS: dict[Structure, Status | None] = {
    structure: lc.STATES[state].status for state in lc.State for structure in lc.STATES[state].structures
}
_NEEDS_HASH = {s for state, place in lc.STATES.items() for s in place.structures if place.hash is True}


def _holders(held: dict[str, list[_Held]], hashes: dict[str, dict[str, str] | None]) -> list[Problem]:
    problems = []
    for job_id, places in held.items():
        where = ", ".join(sorted(p.key.replace("\n", "\\n") for p in places))
        if len(places) > 1:
            problems.append(Problem("two_places", job_id, f"held by {len(places)}: {where}"))
        fields = hashes.get(job_id)
        for place in places:
            problems += _agrees(job_id, place, fields)
    return problems


def _agrees(job_id: str, place: _Held, fields: dict[str, str] | None) -> list[Problem]:
    """Whether one holder agrees with the job's hash."""
    structure, key = place.structure, place.key.replace("\n", "\\n")
    if fields is None:
        if structure in _NEEDS_HASH:
            return [Problem("no_hash", job_id, f"in {key}, but it has no hash")]
        return []
    if structure is lc.VANISHED:
        return [Problem("status", job_id, f"in {key}, but its hash exists again")]
    problems = []
    status, want = fields.get(F.STATUS, ""), _STATUS.get(structure)
    if want is not None and status != want:
        problems.append(Problem("status", job_id, f"in {key} (wants {want}), but its status is {status!r}"))
    if place.queue and fields.get(F.ORIGIN, "") != place.queue:
        problems.append(Problem("queue", job_id, f"in {key}, but its origin is {fields.get(F.ORIGIN)!r}"))
    if structure is lc.PARKED and fields.get(F.PARKED) != place.extra:
        problems.append(
            Problem("parked_flag", job_id, f"in {key}, but dj_parked is {fields.get(F.PARKED)!r}")
        )
    if structure is lc.LINE and (fields.get(F.LINE) != place.extra or _turn(fields) != place.score):
        problems.append(
            Problem(
                "line_flag",
                job_id,
                f"in {key} at {place.score}, but dj_line/dj_turn say "
                f"{fields.get(F.LINE)!r}/{fields.get(F.TURN)!r}",
            )
        )
    return problems


def _turn(fields: dict[str, str]) -> float | None:
    try:
        return float(fields[F.TURN])
    except (KeyError, ValueError):
        return None


def _tokens(
    tokens: dict[str, list[_Held]], hashes: dict[str, dict[str, str] | None], queues: set[str]
) -> list[Problem]:
    """Lease and lost tokens against the wip sets of the audited queues (another queue's wip is not read)."""
    problems = []
    for token, places in tokens.items():
        fields = hashes.get(split_token(token)) or {}
        if fields.get(F.ORIGIN, "") not in queues and not any(p.structure is lc.WIP for p in places):
            continue
        wip = [p for p in places if p.structure is lc.WIP]
        lease = [p for p in places if p.structure is not lc.WIP]
        job_id = split_token(token)
        if lease and not wip:
            problems.append(
                Problem("lease_without_wip", job_id, f"token {token} in {lease[0].key}, not in wip")
            )
        if wip and not lease:
            problems.append(Problem("wip_without_lease", job_id, f"token {token} in {wip[0].key}, no lease"))
    return problems


def _slots(
    reader: _Reader,
    djkeys: list[str],
    tokens: dict[str, list[_Held]],
    held: dict[str, list[_Held]],
    hashes: dict[str, dict[str, str] | None],
    now: float,
) -> list[Problem]:
    """A key's slots are held by live or lost attempts, or by a live hold of a job holding its turn.
    A job type's slots are freed lazily (the claim drops dead tokens as it counts): not checked."""
    problems = []
    live = {t for t, places in tokens.items() if any(p.structure is not lc.WIP for p in places)}
    for key in djkeys:
        scope = key.removeprefix(reader.space.slots_prefix)
        if not key.startswith(reader.space.slots_prefix) or "\n" not in scope:
            continue
        for member, score in reader.members(key, lc.Kind.ZSET):
            name = text(member)
            shown = scope.replace("\n", "\\n")
            if ":" in name:
                if name not in live:
                    problems.append(
                        Problem("dead_slot", split_token(name), f"slot of {shown} held by dead token {name}")
                    )
            elif score is not None and score > now:
                ready = any(p.structure in lc.READY for p in held.get(name, []))
                fields = hashes.get(name) if name in hashes else None
                if not ready or fields is None or fields.get(F.LINE) != scope:
                    problems.append(
                        Problem("dead_slot", name, f"slot of {shown} held for a job not waiting its turn")
                    )
    return problems


def _indexes(
    reader: _Reader, djkeys: list[str], queues: Sequence[str], parked_lists: set[str]
) -> list[Problem]:
    """Nonempty key lines and parked lists that their index does not name."""
    problems, connection, space = [], reader.connection, reader.space
    lines = {space.parked_index(q): q for q in queues}
    candidates = []
    for key in djkeys:
        index, newline, scope = key.partition("\n")
        if newline and index in lines:
            candidates.append(("line", key, index, scope))
        elif (
            key.startswith(space.prefix(lc.PARKED)) and key != space.parked_lists and key not in parked_lists
        ):
            candidates.append(("parked", key, "", ""))
    with connection.pipeline(transaction=False) as pipe:
        for kind, key, index, scope in candidates:
            if kind == "line":
                pipe.zscore(index, scope)
            else:
                pipe.type(key)
        replies = pipe.execute(raise_on_error=False)
    for (kind, key, index, _), reply in zip(candidates, replies, strict=True):
        shown = key.replace("\n", "\\n")
        if kind == "line" and reply is None:
            problems.append(Problem("line_index", "", f"line {shown} holds jobs but is not in {index}"))
        elif kind == "parked" and text(reply) == lc.Kind.LIST:
            problems.append(
                Problem("parked_index", "", f"parked list {shown} is not in {space.parked_lists}")
            )
    return problems


def _nowhere(reader: _Reader, held: dict[str, list[_Held]], queues: set[str]) -> list[Problem]:
    """Hashes of waiting or running jobs that no structure holds, and queued jobs whose flags name a
    place that does not hold them."""
    problems = []
    job_keys = reader.scan(reader.space.job_prefix + "*")
    ids = [k.removeprefix(reader.space.job_prefix) for k in job_keys]
    if not reader.result.complete:
        return []
    hashes = _hashes(reader, ids)
    for job_id, fields in hashes.items():
        if fields is None or fields.get(F.ORIGIN, "") not in queues:
            continue
        status = fields.get(F.STATUS, "")
        places = held.get(job_id, [])
        if not places and status in lc.PENDING:
            problems.append(Problem("nowhere", job_id, f"status {status}, but no structure holds it"))
        if status != Status.QUEUED:
            continue
        kinds = {p.structure for p in places}
        if F.PARKED in fields and lc.PARKED not in kinds:
            problems.append(
                Problem("parked_flag", job_id, f"dj_parked {fields[F.PARKED]!r}, in no parked list")
            )
        if F.LINE in fields and F.PARKED not in fields and not kinds & {lc.LINE, *lc.READY}:
            problems.append(Problem("line_flag", job_id, f"dj_line {fields[F.LINE]!r}, in no line nor queue"))
    return problems
