"""The Redis structures every runjobs relies on hold the type they must hold.

A queue list, a lease set or a scheduled set that is some other type (a key another application
wrote under the same name, a bad migration, a hand-made mistake) makes every push, claim or
maintenance pass that touches it fail, for every job of that queue. Such a key can hold nothing of
ours, so it is moved aside whole to ``djjobs:quarantine:<key>:<time>`` (nothing is deleted), an
``unreadable`` dead letter says where it went, and the structure starts afresh.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from redis import Redis
from redis.exceptions import ResponseError

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import (
    DYING,
    LEASES,
    LOST,
    QUEUES_SET,
    VANISHED,
    Store,
    keys,
    queue_key,
    scheduled_key,
    wake_key,
    wip_key,
)

logger = logging.getLogger("django_jobs.worker")

#: The type each structure must have; "none" (absent) is always fine.
GLOBAL = {
    LEASES: "zset",
    LOST: "zset",
    DYING: "zset",
    VANISHED: "zset",
    QUEUES_SET: "set",
    keys.PAUSED: "hash",
    keys.PARKED: "set",
}


def expected_types(queues: Sequence[str]) -> dict[str, str]:
    """Every structure key of these queues and the shared ones, with the type it must have."""
    types = dict(GLOBAL)
    for queue in queues:
        types |= {
            queue_key(queue): "list",
            wake_key(queue): "list",
            scheduled_key(queue): "zset",
            wip_key(queue): "zset",
        }
        types |= dict.fromkeys([*keys.priority_keys(queue), keys.parked_index(queue)], "zset")
    return types


def wrong_types(connection: Redis, queues: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The structure keys whose type is wrong, with (the type they have, the one they need): those of
    ``expected_types`` and the parked lists of these queues that the set of parked lists names."""
    expected = expected_types(queues)
    try:
        parked = Store.of(connection).parked_lists()
    except ResponseError:  # that set is itself of the wrong type: it is in ``expected``
        parked = []
    expected |= {keys.parked_key(queue, name): "list" for queue, name in parked if queue in queues}
    with connection.pipeline(transaction=False) as pipe:
        for key in expected:
            pipe.type(key)
        found = [t.decode() if isinstance(t, bytes) else str(t) for t in pipe.execute()]
    return {
        key: (kind, want)
        for (key, want), kind in zip(expected.items(), found, strict=True)
        if kind not in (want, "none")
    }


def quarantine_wrong_types(connection: Redis, queues: Sequence[str]) -> int:
    """Move every structure key of the wrong type aside and record it; returns how many."""
    wrong = wrong_types(connection, queues)
    for key, (kind, want) in wrong.items():
        _quarantine_key(connection, key, kind, want)
    return len(wrong)


def _quarantine_key(connection: Redis, key: str, kind: str, want: str) -> None:
    """Record the key as a dead letter first (so a database outage leaves it for the next pass),
    then move it aside."""
    moved = keys.quarantine_key(key, time.time())
    message = (
        f"Redis key {key!r} is a {kind}, not a {want}: every job of its structure failed on it. "
        f"It was moved, unchanged, to {moved!r}; the structure starts afresh."
    )
    failure = deadletter.Failure(
        job_id=f"key {key} {moved}",  # breaks the id rule on purpose: filed under a stable surrogate
        queue="",
        reason=DeadLetter.Reason.UNREADABLE,
        exception="django_jobs.worker.structure.WrongType",
        message=message,
    )
    fields = {"moved_to": moved.encode(), "type": kind.encode()}
    deadletter.quarantine(failure, fields, source="redis key", member=key.encode())
    Store.of(connection).move_aside(key, moved, kind)
