"""The job browser's read side, for the admin's job list and ``manage.py jobs list``: the jobs of some
queues in some states, a page of one structure at a time (:mod:`django_jobs.store.browse`), and the
dead letters from the database.

A filter by state or by name is applied to each page read, so a look is bounded by ``look`` members
read, never by the size of a queue; :class:`Found` says how far it looked.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from django_jobs.core import payload
from django_jobs.core.connections import store_of
from django_jobs.exceptions import PayloadError
from django_jobs.models import DeadLetter, JobHistory
from django_jobs.store import browse, read
from django_jobs.store.browse import LISTED, Listing
from django_jobs.store.lifecycle import F, State

#: The names the state filters take: each lifecycle state's name, lower-cased ("waiting", "in_line").
STATE_NAMES: dict[str, State] = {state.name.lower(): state for state in State}
#: Ended states, listed from the history (``JOBS["HISTORY"]``); dead jobs from their dead letters.
PAST = frozenset({State.FINISHED, State.CANCELLED, State.EXPIRED})
#: States no listing shows: a replaced job's tombstone, a vanished id (``jobs_health`` counts them).
UNLISTED = frozenset(set(State) - set(LISTED) - PAST - {State.DEAD})
#: Members read per round trip while looking for the jobs that pass a filter.
PAGE = 500


@dataclass(frozen=True)
class Row:
    """One job of a listing: what the read model found (``where``), or its dead letter."""

    id: str
    name: str
    queue: str
    state: State | None
    where: read.Where | None = None
    letter: DeadLetter | None = None
    past: JobHistory | None = None

    @classmethod
    def of_past(cls, past: JobHistory) -> Row:
        """The row of a job that ended, from its history row."""
        return cls(past.job_id, past.job_name, past.queue, STATE_NAMES.get(past.state), past=past)

    @property
    def state_name(self) -> str:
        return self.state.name.lower() if self.state else "unknown"

    def detail(self, show_key: bool = True) -> str:
        """What sets it apart in its state, in a few words."""
        where, state = self.where, self.state
        if self.letter is not None:
            return f"{self.letter.reason}: {self.letter.exception}"
        if self.past is not None:
            took = f", ran {self.past.duration:.3f} s" if self.past.duration is not None else ""
            return f"ended {self.past.ended_at:%Y-%m-%d %H:%M:%S} UTC, attempt {self.past.attempts}{took}"
        if where is None:
            return ""
        if state in (State.SCHEDULED, State.RETRYING, State.SNOOZED) and where.due is not None:
            return f"due {_when(where.due)}, attempt {where.record.attempt + 1}"
        if state in (State.RUNNING, State.LOST):
            lease = f", lease to {_when(where.lease_expires)}" if where.lease_expires else ""
            return f"on {where.worker or '?'}, attempt {where.record.attempt}{lease}"
        if where.pause is not None:
            return f"{where.pause.kind} {where.pause.name} paused by {where.pause.by or '?'}"
        if state is State.IN_LINE:
            key = where.record.text(F.LIMIT_KEY) if show_key else "its key"
            return f"behind {key}, {where.ahead} ahead" if where.ahead is not None else f"behind {key}"
        return f"priority {where.priority}" if where.priority else ""

    def _data(self) -> str | bytes:
        if self.past is not None:
            return self.past.data
        return self.where.record.data if self.where is not None else b""

    def arguments(self) -> set[str]:
        """The text of each of its arguments' values (positional and keyword, top level): a string as
        it is, anything else as JSON. Empty when its payload cannot be read."""
        try:
            if self.letter is not None:
                args, kwargs = list(self.letter.args), dict(self.letter.kwargs)
            else:
                data = (
                    self.past.data if self.past is not None else self.where.record.data if self.where else b""
                )
                _, args, kwargs = payload.loads(data)
        except (PayloadError, TypeError, ValueError):
            return set()
        values = [*args, *kwargs.values()]
        return {value if isinstance(value, str) else json.dumps(value, sort_keys=True) for value in values}


@dataclass(frozen=True)
class Query:
    """What the jobs listed must match: a job name, and an argument's value (``17`` finds both
    ``f(17)`` and ``f(account="17")``), for a reader with the payload permission."""

    name: str = ""
    argument: str | None = None

    def matches(self, row: Row) -> bool:
        if self.name and row.name != self.name:
            return False
        return self.argument is None or self.argument in row.arguments()


@dataclass(frozen=True)
class Found:
    rows: list[Row]
    looked: int  # members of Redis structures read, and rows read to match an argument
    complete: bool  # every member of the structures looked in was read


def jobs(
    queues: Sequence[str],
    states: frozenset[State],
    query: Query = Query(),
    limit: int = 50,
    look: int = 10_000,
) -> Found:
    """Up to ``limit`` jobs of ``queues`` in ``states`` (any of them) that match ``query``, reading at
    most ``look`` members of Redis structures (and, for an argument, the newest ``look`` rows of the
    history and of the dead letters: the database holds no index of arguments); ended jobs newest
    first."""
    rows: list[Row] = []
    looked, complete = 0, True
    listings = list(dict.fromkeys(LISTED[state] for state in State if state in states and state in LISTED))
    for queue in queues:
        for listing in listings:
            for batch, read_now, more in _pages(queue, listing, look - looked):
                looked += read_now
                rows += [row for row in batch if row.state in states and query.matches(row)]
                complete = complete and not more
                if len(rows) >= limit:
                    return Found(rows[:limit], looked, complete=False)
    past = [state.name.lower() for state in PAST & states]
    ended = JobHistory.objects.filter(queue__in=queues, state__in=past).order_by("-id")
    letters = DeadLetter.objects.filter(queue__in=queues).order_by("-created_at")
    for wanted, table, row in ((past, ended, Row.of_past), (State.DEAD in states, letters, _of_letter)):
        if wanted and len(rows) < limit:
            found, whole, read_now = _rows(table, row, query, limit - len(rows), look)
            rows, complete, looked = rows + found, complete and whole, looked + read_now
    return Found(rows[:limit], looked, complete)


def _rows(
    table: QuerySet[Any], row: Callable[[Any], Row], query: Query, limit: int, look: int
) -> tuple[list[Row], bool, int]:
    """Up to ``limit`` rows of ``table`` that match ``query``, whether all were looked at, and how
    many rows were read for an argument: the database filters by name; an argument is looked for
    among the newest ``look`` rows."""
    if query.name:
        table = table.filter(job_name=query.name)
    if query.argument is None:
        return [row(one) for one in table[:limit]], True, 0
    scanned = [row(one) for one in table[:look]]
    matching = [found for found in scanned if query.matches(found)]
    return matching[:limit], not table[look : look + 1].exists(), len(scanned)


def _of_letter(letter: DeadLetter) -> Row:
    return Row(letter.job_id, letter.job_name, letter.queue, State.DEAD, letter=letter)


def _pages(queue: str, listing: Listing, budget: int) -> Iterator[tuple[list[Row], int, bool]]:
    """The listing's rows a page at a time, with how many members each page read, and whether more
    remained unread when the budget ran out."""
    store = store_of(queue)
    start = 0
    while budget > 0:
        page = browse.page(store, queue, listing, start, min(PAGE, budget))
        read_now = len(page.jobs)
        rows = [_row(where) for where in page.jobs if listing not in _SHARED or where.record.queue == queue]
        start += read_now
        budget -= read_now
        yield rows, read_now, start < page.total and budget <= 0
        if read_now == 0 or start >= page.total:
            return


#: Listings of a structure every queue of a server shares: their rows are filtered by queue.
_SHARED = (Listing.LOST, Listing.DYING)


def _row(where: read.Where) -> Row:
    return Row(where.id, where.record.name, where.record.queue, where.state, where)


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
