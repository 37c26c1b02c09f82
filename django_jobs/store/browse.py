"""The job browser's Redis side: one page of one queue's jobs in one group of states, each located by
the read model (:func:`.read.locate`).

A page reads the lengths of the structures that hold the group (one pipelined round trip), then one
slice of them (LRANGE / ZRANGE by index), then the jobs it found: O(page), never O(queue), so a
100,000-job queue pages as fast as a 10-job one. A structure that is several keys (a queue's parked
lists, its keys' lines) is read as their concatenation, the keys in a stable order, at most
:data:`LINES_LOOKED` of them. Nothing here is written for the browser: it reads the lifecycle's
own structures.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis import Redis
from redis.exceptions import ResponseError

from django_jobs.store import read
from django_jobs.store.lifecycle import State
from django_jobs.store.record import split_token, text
from django_jobs.store.scripts import Part

#: Keys' lines (or parked lists) of one queue read for a page; past them, jobs are not listed.
LINES_LOOKED = 1000


class Listing(enum.Enum):
    """The groups of states the browser lists, each from the structures that hold it, in the order a
    worker would take them. Ended jobs (finished, cancelled, expired) are held by no structure."""

    READY = enum.auto()  # waiting (with or without a priority, or holding its key's turn), or held by a pause
    SCHEDULED = enum.auto()  # scheduled, retrying, snoozed: by due time
    RUNNING = enum.auto()
    PARKED = enum.auto()  # set aside while their job type is paused
    IN_LINE = enum.auto()  # parked behind their key's limit
    LOST = enum.auto()  # their lease expired; the supervisor settles them
    DYING = enum.auto()  # being dead-lettered
    FOREIGN = enum.auto()  # failed by a foreign worker (an rqworker), in RQ's failed registry


#: Which listing shows each state a job can be in while Redis holds it.
LISTED: dict[State, Listing] = {
    State.WAITING: Listing.READY,
    State.WAITING_PRIORITY: Listing.READY,
    State.TURN: Listing.READY,
    State.HELD: Listing.READY,
    State.SCHEDULED: Listing.SCHEDULED,
    State.RETRYING: Listing.SCHEDULED,
    State.SNOOZED: Listing.SCHEDULED,
    State.RUNNING: Listing.RUNNING,
    State.PARKED: Listing.PARKED,
    State.IN_LINE: Listing.IN_LINE,
    State.LOST: Listing.LOST,
    State.DYING: Listing.DYING,
    State.FOREIGN: Listing.FOREIGN,
}


#: The states each listing shows.
LISTED_IN: dict[Listing, frozenset[State]] = {
    listing: frozenset(state for state, where in LISTED.items() if where is listing) for listing in Listing
}


@dataclass(frozen=True)
class Page:
    """One page of a listing: the jobs found, where they are; how many the listing holds."""

    jobs: list[read.Where]
    total: int
    start: int


@dataclass(frozen=True)
class _Part:
    """One key of a listing: its length, and how to read a slice of it as job ids."""

    key: str
    zset: bool
    tokens: bool = False  # members are lease tokens: the job id is their first part

    def length(self, pipe: Any) -> None:
        pipe.zcard(self.key) if self.zset else pipe.llen(self.key)

    def slice(self, pipe: Any, first: int, last: int) -> None:
        pipe.zrange(self.key, first, last) if self.zset else pipe.lrange(self.key, first, last)

    def ids(self, members: list[bytes]) -> list[str]:
        return [split_token(text(m)) if self.tokens else text(m) for m in members]


def _zset(key: str, tokens: bool = False) -> _Part:
    return _Part(key, True, tokens)


def _list(key: str) -> _Part:
    return _Part(key, False)


def _parts(store: Part, queue: str, listing: Listing) -> list[_Part]:
    connection, space = store.connection, store.keys
    if listing is Listing.READY:
        high, low = space.priority(queue)
        return [_zset(high), _list(space.queue(queue)), _zset(low)]
    if listing is Listing.SCHEDULED:
        return [_zset(space.scheduled(queue))]
    if listing is Listing.RUNNING:
        return [_zset(space.wip(queue), tokens=True)]
    if listing is Listing.PARKED:
        pairs = read.parked_pairs(connection.smembers(space.parked_lists))  # type: ignore[arg-type]
        return [_list(space.parked(q, name)) for q, name in pairs if q == queue][:LINES_LOOKED]
    if listing is Listing.IN_LINE:
        scopes: list[bytes] = connection.zrange(space.parked_index(queue), 0, LINES_LOOKED - 1)  # type: ignore[assignment]
        return [_zset(space.parked_line(queue, text(scope))) for scope in sorted(scopes)]
    if listing is Listing.FOREIGN:
        return [_zset(space.failed(queue))]
    return [_zset(space.lost if listing is Listing.LOST else space.dying, tokens=listing is Listing.LOST)]


def page(store: Part, queue: str, listing: Listing, start: int = 0, count: int = 50) -> Page:
    """Jobs ``start`` to ``start + count`` of ``listing`` in ``queue``. The lost and dying sets are
    one per server: their page holds the jobs of every queue, for the caller to filter."""
    job_ids, total = ids(store, queue, listing, start, count)
    found = read.locate(store, job_ids, [queue]) if job_ids else {}
    return Page([found[job_id] for job_id in job_ids], total, start)


def ids(store: Part, queue: str, listing: Listing, start: int = 0, count: int = 50) -> tuple[list[str], int]:
    """The ids of :func:`page`, not located, and how many the listing holds: two round trips."""
    connection = store.connection
    try:
        parts = _parts(store, queue, listing)
    except ResponseError:  # an index of the wrong type (runjobs moves it aside): nothing to list
        parts = []
    with connection.pipeline(transaction=False) as pipe:
        for part in parts:
            part.length(pipe)
        lengths = [n if isinstance(n, int) else 0 for n in pipe.execute(raise_on_error=False)]
    return _slice(connection, parts, lengths, start, count), sum(lengths)


def _slice(
    connection: Redis, parts: Sequence[_Part], lengths: Sequence[int], start: int, count: int
) -> list[str]:
    """The ids at ``start`` to ``start + count`` of the parts read one after the other."""
    with connection.pipeline(transaction=False) as pipe:
        asked = []
        offset = 0
        for part, length in zip(parts, lengths, strict=True):
            first, last = max(start - offset, 0), min(start + count - offset, length) - 1
            if first <= last:
                part.slice(pipe, first, last)
                asked.append(part)
            offset += length
        replies = pipe.execute(raise_on_error=False) if asked else []
    ids: list[str] = []
    for part, members in zip(asked, replies, strict=True):
        if isinstance(members, list):
            ids.extend(part.ids(members))
    return list(dict.fromkeys(ids))  # a job listed twice (it moved while read) once
