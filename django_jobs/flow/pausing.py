"""Pausing a queue or a job type at runtime, on every host at once: :func:`pause`, :func:`resume`,
:func:`paused`, and :class:`Held`, what a work process leaves out of its claims.

The state is one small hash per Redis server (``djjobs:paused``: who, when, why), so every
``runjobs`` sees a change within a second and one that was down meanwhile sees it when it starts. A
paused queue is left out of every claim: its jobs stay in it, untouched. A job of a paused type is
parked by the claim that pops it (in its order, without an attempt) and goes back to the head of its
queue on resume. Running jobs finish either way. Nothing here adds a Redis command to a claim: a work
process reads the hash at most once a second, and the claim script asks it only about a job whose
type that reading said was paused.
"""

from __future__ import annotations

import contextlib
import getpass
import logging
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.exceptions import RedisError

from django_jobs.core import audit, registry
from django_jobs.core.connections import connection_identity, queue_configs, server_stores
from django_jobs.exceptions import JobNotFound
from django_jobs.store import Pause, Store

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser
    from django.contrib.auth.models import AnonymousUser

    Actor = AbstractBaseUser | AnonymousUser | None

logger = logging.getLogger("django_jobs.worker")

#: Who may pause and resume, in the admin and from ``manage.py jobs_pause`` / ``jobs_resume``.
PAUSE_PERMISSION = "django_jobs.pause_queue"
#: The longest reason a pause records: it is shown on the overview and in ``jobs_health``.
MAX_REASON = 500
#: Seconds between a work process's readings of what is paused.
REFRESH = 1.0
#: Parked jobs one resume script moves at once (it runs O(batch) inside Redis).
UNPARK_BATCH = 500

__all__ = ["PAUSE_PERMISSION", "Held", "Pause", "Resumed", "describe", "pause", "paused", "resume", "target"]


@dataclass(frozen=True)
class Resumed:
    """What :func:`resume` did: whether it was paused, and how many parked jobs went back to a queue."""

    was_paused: bool
    released: int


def pause(
    *,
    queue: str | None = None,
    job: str | registry.Job[Any, Any] | None = None,
    reason: str = "",
    actor: Actor = None,
) -> bool:
    """Pause ``queue`` (a key of ``RQ_QUEUES``) or the job type ``job`` (a ``@job``, or its name or an
    alias) everywhere; returns False if it was already paused (its record is kept).

    Immediate, not deferred to a transaction's commit. ``actor`` (a user) is recorded as who paused
    it and in the admin log; without one, this process's login and host are. Raises
    ``ConfigurationError`` for an unknown queue, ``JobNotFound`` for an unknown job, ``ValueError``
    for a bad argument, ``RedisError`` if a Redis server does not answer.
    """
    kind, name = target(queue, job)
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError(f"reason is text of at most {MAX_REASON} characters, got {str(reason)[:60]!r}.")
    who = _who(actor)
    done = [store.pause(kind, name, by=who, reason=reason) for store, _ in _stores(kind, name)]
    if any(done):
        _audit(actor, kind, name, f"Paused: {reason}" if reason else "Paused.")
    return any(done)


def resume(
    *, queue: str | None = None, job: str | registry.Job[Any, Any] | None = None, actor: Actor = None
) -> Resumed:
    """Lift the pause of ``queue`` or of the job type ``job``; a type's parked jobs go back to the
    head of their queues, in their order. Resuming what is not paused changes nothing (it still
    releases parked jobs a resume that died half-way left behind). Raises as :func:`pause` does; a
    job type no longer registered can be resumed by the name it was paused under."""
    try:
        kind, name = target(queue, job)
    except JobNotFound:
        if not any(p.kind == "job" and p.name == job for p in paused()):
            raise
        kind, name = "job", str(job)
    was_paused, released = False, 0
    for store, queues in _stores(kind, name):
        was_paused |= store.resume(kind, name)
        if kind == "job":
            released += _unpark(store, name, queues)
    if was_paused or released:
        _audit(actor, kind, name, f"Resumed ({released} held job(s) back on their queue).")
    return Resumed(was_paused, released)


def paused() -> list[Pause]:
    """What is paused, on every Redis server of ``RQ_QUEUES``: job types, then queues, each by name.
    A job type is paused on each server; it is listed once, with its first pause."""
    found: dict[tuple[str, str], Pause] = {}
    for _, store in server_stores(list(queue_configs())):
        for one in store.pauses():
            known = found.get((one.kind, one.name))
            if known is None or (one.at or 0.0) < (known.at or 0.0):
                found[one.kind, one.name] = one
    return [found[key] for key in sorted(found)]


def describe(one: Pause, now: float) -> str:
    """One pause in a line, for the commands: ``queue emails: paused 312 s ago by alice@web-1: deploy``."""
    ago = "at an unknown time" if one.at is None else f"{one.seconds(now):.0f} s ago"
    why = f": {one.reason}" if one.reason else ""
    return f"{one.kind} {one.name}: paused {ago} by {one.by or '?'}{why}"


def target(queue: str | None = None, job: str | registry.Job[Any, Any] | None = None) -> tuple[str, str]:
    """("queue", name) or ("job", the type's current name), checked: what :func:`pause` would pause."""
    if (queue is None) == (job is None):
        raise ValueError("Pass exactly one of queue= and job=.")
    if queue is not None:
        if not isinstance(queue, str):
            raise ValueError(f"queue= takes a queue's name, got {queue!r}.")
        connection_identity(queue)  # raises ConfigurationError, naming the known queues
        return "queue", queue
    if isinstance(job, registry.Job):
        return "job", job.name
    if not isinstance(job, str):
        raise ValueError(f"job= takes a @job or a job's name, got {job!r}.")
    return "job", registry.get(job).name  # raises JobNotFound for an unknown name


def _stores(kind: str, name: str) -> list[tuple[Store, list[str]]]:
    """Where the pause lives, with the configured queues of each server: the queue's Redis, or for a
    job type every server (its jobs may be enqueued on any queue)."""
    queues = [name] if kind == "queue" else list(queue_configs())
    return [(store, names) for names, store in server_stores(queues)]


def _unpark(store: Store, name: str, queues: Iterable[str]) -> int:
    """Release every parked job of type ``name`` on this server: the parked lists the set names,
    and those of this server's configured queues (in case the set lost one)."""
    listed = {queue for queue, parked in store.parked_lists() if parked == name}
    released = 0
    for queue in sorted(listed | set(queues)):
        moved, left = store.unpark(queue, name, UNPARK_BATCH)
        released += moved
        while moved and left:
            moved, left = store.unpark(queue, name, UNPARK_BATCH)
            released += moved
    return released


def _who(actor: Actor) -> str:
    if actor is not None and actor.is_authenticated:
        return str(actor.get_username())
    try:
        login = getpass.getuser()
    except (OSError, KeyError):  # no login name in the environment nor the password database
        login = "unknown"
    return f"{login}@{socket.gethostname()}"


def _audit(actor: Actor, kind: str, name: str, message: str) -> None:
    """The admin log's record of a pause or resume, which has no row of its own: who, what, when."""
    what = f"{'Queue' if kind == 'queue' else 'Job type'} {name}"
    audit.record(actor, [audit.Entry(f"{kind}:{name}", what, message)])


class Plan(NamedTuple):
    """What a work process's claims ask of one server: its unpaused queues in order, the limits
    argument of the claim script, and the queues whose high-priority set held jobs at the last look."""

    queues: list[str]
    limits: str
    prioritized: frozenset[str]


class Held:
    """What a work process leaves out of its claims: its paused queues, the paused job types (their
    names and aliases travel to the claim script with the limits, which parks their jobs), and a look
    at the high-priority sets of queues whose reading found them empty.

    It reads the paused hash and whether each high-priority set has jobs at most once per
    :data:`REFRESH` seconds, so the claims themselves pay nothing; a change of pauses is logged once
    per work process. While Redis does not answer, the last reading stands (the claim fails anyway).
    """

    def __init__(self, store: Store, queues: Sequence[str]) -> None:
        self.store, self.queues = store, list(queues)
        self.pauses: list[Pause] = []
        self._next = 0.0
        self._plan = Plan(self.queues, registry.limits_json(), frozenset(self.queues))

    def claim(self) -> Plan:
        """The queues to claim from, in order, the limits argument, and the prioritized queues."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + REFRESH
            with contextlib.suppress(RedisError):
                self._apply(*self.store.claim_state(self.queues))
        return self._plan

    def _apply(self, pauses: list[Pause], prioritized: set[str]) -> None:
        plan = self._plan
        if pauses != self.pauses:
            _log_changes(self.pauses, pauses, self.queues)
            self.pauses = pauses
            queues = {p.name for p in pauses if p.kind == "queue"}
            jobs = [p.name for p in pauses if p.kind == "job"]
            unpaused = [q for q in self.queues if q not in queues]
            plan = plan._replace(queues=unpaused, limits=registry.limits_json(jobs))
        self._plan = plan._replace(prioritized=frozenset(prioritized))


def _log_changes(before: Iterable[Pause], after: Iterable[Pause], queues: Sequence[str]) -> None:
    was = {(p.kind, p.name): p for p in before if p.kind == "job" or p.name in queues}
    now = {(p.kind, p.name): p for p in after if p.kind == "job" or p.name in queues}
    for (kind, name), one in now.items():
        if (kind, name) not in was:
            held = "its jobs wait in it" if kind == "queue" else "its jobs are set aside as they come up"
            why = f": {one.reason}" if one.reason else ""
            logger.info("%s %s is paused (by %s%s); %s", kind.capitalize(), name, one.by or "?", why, held)
    for kind, name in was.keys() - now.keys():
        logger.info("%s %s is resumed", kind.capitalize(), name)
