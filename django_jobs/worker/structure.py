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

from redis.exceptions import ResponseError

from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import Store, keys
from django_jobs.store.keys import Keyspace

logger = logging.getLogger("django_jobs.worker")


def expected_types(space: Keyspace, queues: Sequence[str]) -> dict[str, str]:
    """Every structure key of these queues and the namespace's own, with the type it must have;
    "none" (absent) is always fine."""
    types = {
        space.leases: "zset",
        space.lost: "zset",
        space.dying: "zset",
        space.vanished: "zset",
        space.queues_set: "set",
        space.paused: "hash",
        space.parked_lists: "set",
    }
    for queue in queues:
        layout = space.layout(queue)
        types |= {layout.list: "list", layout.wake: "list", layout.scheduled: "zset", layout.wip: "zset"}
        types |= dict.fromkeys([layout.high, layout.low, layout.lines], "zset")
    return types


def wrong_types(store: Store, queues: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The structure keys whose type is wrong, with (the type they have, the one they need): those of
    ``expected_types`` and the parked lists of these queues that the set of parked lists names."""
    connection, space = store.connection, store.keys
    expected = expected_types(space, queues)
    try:
        parked = store.parked_lists()
    except ResponseError:  # that set is itself of the wrong type: it is in ``expected``
        parked = []
    expected |= {space.parked(queue, name): "list" for queue, name in parked if queue in queues}
    with connection.pipeline(transaction=False) as pipe:
        for key in expected:
            pipe.type(key)
        found = [t.decode() if isinstance(t, bytes) else str(t) for t in pipe.execute()]
    return {
        key: (kind, want)
        for (key, want), kind in zip(expected.items(), found, strict=True)
        if kind not in (want, "none")
    }


def quarantine_wrong_types(store: Store, queues: Sequence[str]) -> int:
    """Move every structure key of the wrong type aside and record it; returns how many."""
    wrong = wrong_types(store, queues)
    for key, (kind, want) in wrong.items():
        _quarantine_key(store, key, kind, want)
    return len(wrong)


def _quarantine_key(store: Store, key: str, kind: str, want: str) -> None:
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
    store.move_aside(key, moved, kind)
