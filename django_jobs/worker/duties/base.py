"""What every duty shares: the scope it works in, the base class, and how failures are told apart."""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from django.db import DatabaseError, InterfaceError, OperationalError
from redis import exceptions as redis_errors

from django_jobs.core.connections import queue_configs, queues_on
from django_jobs.models import DeadLetter
from django_jobs.store import Store

logger = logging.getLogger("django_jobs.worker")

#: Errors that say a service is down or busy, not that the item is bad: keep the item, retry later.
_TRANSIENT = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.OutOfMemoryError,
    redis_errors.ReadOnlyError,
    redis_errors.ClusterError,
    redis_errors.TryAgainError,
    redis_errors.NoPermissionError,
    OperationalError,
    InterfaceError,
)

#: Errors that say a Redis server does not answer at all: the rest of its pass is skipped.
UNREACHABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` means "retry later" (a service down) rather than "this item is bad"."""
    return isinstance(exc, _TRANSIENT) or str(exc).startswith(("BUSY ", "LOADING ", "MASTERDOWN "))


def guarded(what: str, action: Callable[[], object]) -> Exception | None:
    """Run one duty or item; a failure is logged and retried next time, never fatal. Returns it."""
    try:
        action()
    except (redis_errors.RedisError, DatabaseError) as exc:
        logger.warning("%s skipped (%s); will retry.", what, exc)
        return exc
    except Exception as exc:
        logger.exception("%s failed", what)
        return exc
    return None


def exc_path(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


class Strikes:
    """Each failing item's last failure, so the second identical one can be told from a first."""

    LIMIT = 10_000  # items remembered; past it the memory starts afresh (a strike costs one retry)

    def __init__(self) -> None:
        self.last: dict[tuple[str, bytes], str] = {}

    def second(self, item: tuple[str, bytes], exc: BaseException) -> bool:
        """Record this failure; True if the item already failed exactly this way."""
        signature = f"{exc_path(exc)}: {exc}"
        if self.last.pop(item, None) == signature:
            return True
        if len(self.last) >= self.LIMIT:
            self.last.clear()
        self.last[item] = signature
        return False

    def forget(self, item: tuple[str, bytes]) -> None:
        self.last.pop(item, None)


class Unreadable(Exception):
    """An item no retry can help (unreadable bytes, a broken id, a key that is not a hash)."""

    reason = DeadLetter.Reason.UNREADABLE


class Vanished(Unreadable):
    """A job whose hash is gone from Redis (eviction, a deleted key): nothing can run it."""

    reason = DeadLetter.Reason.VANISHED


@dataclass
class Scope:
    """Where a server's duties work: its store, the queues this runjobs serves there, the
    maintenance interval, and whether it is the ``lead`` server (the first one: it also does what is
    done once per runjobs). ``strikes`` is shared, so an item's two failures are told apart."""

    store: Store
    queues: Sequence[str]
    interval: float = 0.25
    lead: bool = True
    strikes: Strikes = field(default_factory=Strikes)

    def owns(self, queue: str) -> bool:
        """Whether ``queue``'s ledger rows and periodic jobs are this server's to handle."""
        if queue in self.queues:
            return True
        if queue not in queue_configs():
            return self.lead
        return queue in queues_on(self.queues[0])


class Duty(ABC):
    """One periodic duty: ``run`` does one step of it, at most once per ``interval`` seconds: ``every``
    if the duty fixes it, else the maintenance interval, up to ``at_most``."""

    name: ClassVar[str]
    every: ClassVar[float | None] = None
    at_most: ClassVar[float] = math.inf

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.interval = self.every if self.every is not None else min(scope.interval, self.at_most)

    @abstractmethod
    def run(self) -> None: ...
