"""Will the code being deployed run the jobs already waiting? ``manage.py jobs_deploy check``.

Every job of the backlog (ready, scheduled, retrying, held, parked, in line, running, lost, on every
Redis server; the outbox rows; the open dead letters, which a requeue would send again) is bound to
the signature of the job its name resolves to in this code: its name (or an alias) must be
registered, and its arguments must bind. Read in batches of ``batch`` ids (one round trip for the ids,
one for their payloads), never written to: O(backlog) reads, nothing else.
"""

from __future__ import annotations

import inspect
import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from django_jobs.core import payload, registry, results
from django_jobs.core.connections import queue_configs, server_stores
from django_jobs.exceptions import JobNotFound, PayloadError
from django_jobs.models import DeadLetter, OutboxEntry, outbox_aliases
from django_jobs.store import Store, browse
from django_jobs.store.browse import Listing
from django_jobs.store.lifecycle import ENDED, F

_ENDED = {status.value for status in ENDED}
#: Ids read per round trip.
BATCH = 1000
#: The listings that hold jobs a worker will still run: running covers the lost attempts too (a
#: queue's wip set holds both); dying ones are being dead-lettered.
WAITING = (Listing.READY, Listing.SCHEDULED, Listing.RUNNING, Listing.PARKED, Listing.IN_LINE)


@dataclass
class Checked:
    """What the check found: per (job name, why it will not bind), how many and one sample id."""

    jobs: int = 0
    problems: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, job_id: str, name: str, why: str | None) -> None:
        self.jobs += 1
        if why is not None:
            self.problems[(name, why)] += 1
            self.samples.setdefault((name, why), job_id)


def check(queues: Sequence[str] | None = None, batch: int = BATCH) -> Checked:
    """Bind every job of the backlog of ``queues`` (default: every queue) to this code."""
    names = list(queues or queue_configs())
    checked = Checked()
    seen: set[str] = set()  # a "ledger" job is in Redis and in the outbox: checked once
    for server_queues, store in server_stores(names):
        for job_id, data in _redis_jobs(store, server_queues, batch):
            seen.add(job_id)
            _check(checked, job_id, data)
    for alias in outbox_aliases():
        rows = OutboxEntry.objects.using(alias).filter(queue__in=names).values_list("id", "queue", "data")
        for chunk in _chunks(rows.iterator(chunk_size=batch), batch):
            unseen = [(row_id, queue, text) for row_id, queue, text in chunk if row_id not in seen]
            ended = results.statuses({row_id: queue for row_id, queue, _ in unseen})
            for row_id, _, text in unseen:
                if ended.get(row_id) not in _ENDED:  # a row of a job that ended is about to go
                    _check(checked, row_id, text)
    letters = DeadLetter.objects.filter(queue__in=names, status=DeadLetter.Status.OPEN)
    for job_id, name, args, kwargs in letters.values_list("job_id", "job_name", "args", "kwargs").iterator(
        chunk_size=batch
    ):
        checked.add(job_id, name, _binds(name, args, kwargs))
    return checked


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _redis_jobs(store: Store, queues: Sequence[str], batch: int) -> Iterator[tuple[str, bytes]]:
    """(id, payload) of every waiting or running job of ``queues``."""
    for queue in queues:
        for listing in WAITING:
            start, total = 0, 1
            while start < total:
                job_ids, total = browse.ids(store, queue, listing, start, batch)
                start += batch
                if job_ids:
                    with store.connection.pipeline(transaction=False) as pipe:
                        for job_id in job_ids:
                            pipe.hget(store.keys.job(job_id), F.DATA)
                        found = pipe.execute(raise_on_error=False)
                    yield from ((i, d) for i, d in zip(job_ids, found, strict=True) if isinstance(d, bytes))


def _check(checked: Checked, job_id: str, data: str | bytes) -> None:
    try:
        name, args, kwargs = payload.loads(data)
    except PayloadError as exc:
        checked.add(job_id, "(unreadable)", str(exc))
        return
    checked.add(job_id, name, _binds(name, args, kwargs))


def _binds(name: str, args: Any, kwargs: Any) -> str | None:
    """Why a call of ``name`` with these arguments would fail in this code, or None if it binds."""
    try:
        definition = registry.get(name)
    except JobNotFound:
        return "no job or alias of this name"
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return "its arguments are not a list and a dict"
    try:
        inspect.signature(definition.func).bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None
