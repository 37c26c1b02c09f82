"""The push of a batch of jobs: one script call per chunk, each queue's keys and each job's once."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django_jobs.store.interface import Packer
from django_jobs.store.keys import Keyspace
from django_jobs.store.lifecycle import F
from django_jobs.store.model import Pushable
from django_jobs.store.record import text
from django_jobs.store.scripts import INTERFACES, Part

#: Wake-up tokens a push leaves at most in a queue's wake list.
WAKE_CAP = 64
#: Seconds a unique key's marker (and a replaced job's tombstone) lives.
UNIQUE_TTL = 7 * 24 * 3600


def push_calls(
    space: Keyspace, batch: Sequence[Pushable], chunk: int = 500, extra: Mapping[str, Any] | None = None
) -> list[tuple[list[Any], list[Any]]]:
    """The push script's calls for ``batch``: KEYS and ARGV per chunk of jobs; ``extra``: fields
    every job's hash gets besides its own."""
    return [_push_call(space, batch[start : start + chunk], extra) for start in range(0, len(batch), chunk)]


def _push_call(
    space: Keyspace, jobs: Sequence[Pushable], extra: Mapping[str, Any] | None
) -> tuple[list[Any], list[Any]]:
    """One push: each queue named once (a job says its queue's number), each job's hash, each marker."""
    number: dict[str, int] = {}
    hashes, markers, batch = [], [], []
    added = [item for pair in extra.items() for item in pair] if extra else []
    for j in jobs:
        if j.queue not in number:
            number[j.queue] = len(number) + 1
        hashes.append(space.job(j.id))
        marker = 0
        if j.unique_key:
            markers.append(space.unique(j.unique_key))
            marker = len(markers)
        fields = [item for pair in j.fields().items() for item in pair] + added
        batch.append([j.id, number[j.queue], j.due, fields, marker, j.debounce, j.priority])
    return _packer(space, tuple(number))(job=hashes, marker=markers, jobs=json.dumps(batch))


@functools.lru_cache(maxsize=64)
def _packer(space: Keyspace, queues: tuple[str, ...]) -> Packer:
    """The packer of the pushes to these queues (in this order): its fixed keys and arguments, the
    queues' keys included, packed once, so a push of one job costs only its own names."""
    return INTERFACES["push"].packer(
        queues_set=space.queues_set,
        wake_cap=WAKE_CAP,
        unique_ttl=UNIQUE_TTL,
        prefix=space.job_prefix,
        sched_prefix=space.scheduled(""),
        queue=[space.queue_keys(queue) for queue in queues],
    )


class Pushing(Part):
    """The push."""

    def push(
        self, jobs: Iterable[Pushable], chunk: int = 500, extra: Mapping[str, Any] | None = None
    ) -> set[str]:
        """Push jobs in one round trip; returns the ids not pushed (already there, or unique duplicates).
        ``extra``: fields every job's hash gets besides its own (``F.LEDGER``)."""
        calls = push_calls(self.keys, list(jobs), chunk, extra)
        seen: set[str] = set()
        if not calls:
            return seen
        script = self.scripts.push.script
        if len(calls) == 1:  # the common case: one EVALSHA, no pipeline (which would add SCRIPT EXISTS)
            results = [script(keys=calls[0][0], args=calls[0][1])]
        else:
            with self.connection.pipeline(transaction=False) as pipe:
                for call_keys, call_args in calls:
                    script(keys=call_keys, args=call_args, client=pipe)
                results = pipe.execute()
        for result in results:
            seen.update(text(x) for x in result)
        return seen

    def unmark_ledger(self, ids: Iterable[str]) -> None:
        """These jobs were pushed with ``F.LEDGER`` but their ledger row was never written: take the mark
        back, so that no one takes the missing row for the trace of a job that ran."""
        with self.connection.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hdel(self.keys.job(job_id), F.LEDGER)
            pipe.execute()
