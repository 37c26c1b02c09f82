"""The Redis servers of one ``runjobs``: each is used while it answers and set aside while it does not,
so a server that is down (or frozen) costs only its own queues.

:class:`Reach` is one process's view of one server. After a failure the server is left alone and
asked again only by a probe (a PING on a client with short timeouts), after a backoff that doubles up
to ``MAX_BACKOFF`` for a server that timed out (a frozen one costs at most ``PROBE_TIMEOUT`` per
probe) and up to ``REFUSED_BACKOFF`` for one that refused (a dead primary, no primary yet): such a
probe costs next to nothing, and the first one after a Sentinel failover finds the new primary within
that much. A success resets the backoff.

:func:`wait_any` is the idle wait of a work process whose queues live on several servers. BLPOP
cannot span servers, so it sends one BLPOP per server, each on a connection of its own, and waits
on their sockets together: a job pushed to any of them wakes the process at once, and an idle
process costs each server one BLPOP a second, as with one server. When one server wakes it, the
other BLPOPs are abandoned by closing their connections (Redis drops a blocked client that goes
away), so a busy process takes no wake-up token meant for an idle one.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis import Redis
from redis.connection import Connection
from redis.exceptions import RedisError, TimeoutError

from django_jobs.store.keys import STANDALONE, Keyspace
from django_jobs.telemetry.logs import server_name

logger = logging.getLogger("django_jobs.worker")

#: Seconds a server that failed is left alone before the first probe; doubled after each failure, up
#: to MAX_BACKOFF after a timeout and REFUSED_BACKOFF after any other failure.
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0
REFUSED_BACKOFF = 0.25
#: Socket and connect timeouts of a probe: a frozen server holds up the loop at most this long.
PROBE_TIMEOUT = 0.5
#: Seconds of an idle BLPOP, and how much later than that its reply may come before its server is
#: taken for frozen.
IDLE_WAIT = 1
IDLE_GRACE = 1.0


@dataclass(frozen=True)
class Server:
    """One Redis server ``runjobs`` serves: its queues (in the order given), the client its work uses,
    the client of its probes (short timeouts), and the namespace its queues' keys are in."""

    queues: tuple[str, ...]
    connection: Redis
    probe: Redis
    keys: Keyspace = STANDALONE

    @property
    def name(self) -> str:
        """Where it is, without a password (logs and the ``server`` label)."""
        return server_name(self.connection)


class Reach:
    """Whether one Redis server answers, as one process sees it; ``on_change(up)`` hears of each change."""

    def __init__(self, server: Server, on_change: Callable[[bool], None] | None = None) -> None:
        self.server, self.on_change = server, on_change
        self.down_since: float | None = None
        self.retry_at = 0.0
        self.backoff = FIRST_BACKOFF

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def up(self) -> bool:
        """True if the server may be used now: it answered last time, or a probe that is due answers."""
        if self.down_since is None:
            return True
        now = time.monotonic()
        if now < self.retry_at:
            return False
        try:
            self.server.probe.ping()
        except RedisError as exc:
            logger.debug("Redis %s still does not answer (%s)", self.server.name, exc)
            self._later(now, exc)
            return False
        logger.warning(
            "Redis %s answers again after %.1f s; its queues %s resume.",
            self.server.name, now - self.down_since, ", ".join(self.server.queues),
        )  # fmt: skip
        self.down_since = None
        if self.on_change is not None:
            self.on_change(True)
        return True

    def ok(self) -> None:
        """It did what was asked: the next failure starts a fresh backoff."""
        self.backoff = FIRST_BACKOFF

    def failed(self, exc: RedisError) -> None:
        """It failed: leave it alone for the backoff (doubling), then probe it."""
        now = time.monotonic()
        self._later(now, exc)
        logger.warning(
            "Redis %s failed (%s); its queues %s wait, any others go on. Asking again in %.1f s.",
            self.server.name, exc, ", ".join(self.server.queues), self.retry_at - now,
        )  # fmt: skip
        if self.down_since is None:
            self.down_since = now
            if self.on_change is not None:
                self.on_change(False)

    def _later(self, now: float, exc: RedisError) -> None:
        self.retry_at = now + self.backoff
        cap = MAX_BACKOFF if isinstance(exc, TimeoutError) else REFUSED_BACKOFF
        self.backoff = min(self.backoff * 2, cap)


def soonest_retry(reaches: Sequence[Reach]) -> float:
    """Seconds until the first of these servers that is down is due to be probed (0 if one is up)."""
    now = time.monotonic()
    return max(min((r.retry_at - now if r.down else 0.0) for r in reaches), 0.0)


def wait_any(reaches: Sequence[Reach]) -> None:
    """Block until a wake-up token arrives on any of these servers that answers, or ``IDLE_WAIT``
    seconds pass; with every server down, until the first probe is due (at most ``IDLE_WAIT``)."""
    armed: dict[socket.socket, tuple[Connection, Reach]] = {}
    for reach in reaches:
        if reach.up():
            connection = _blpop(reach)
            if connection is not None and connection._sock is not None:
                armed[connection._sock] = (connection, reach)
    if not armed:
        time.sleep(min(soonest_retry(reaches), IDLE_WAIT) or 0.05)
        return
    ready, _, _ = select.select(list(armed), [], [], IDLE_WAIT + IDLE_GRACE)
    for sock, (connection, reach) in armed.items():
        if sock in ready:
            _read(connection, reach)
        else:  # abandoned: closing the connection makes Redis drop the blocked BLPOP
            connection.disconnect()  # type: ignore[no-untyped-call]
            if not ready:  # not even its timeout reply came: a frozen server
                reach.failed(TimeoutError(f"no reply within {IDLE_WAIT + IDLE_GRACE:g} s"))
        reach.server.connection.connection_pool.release(connection)


def _blpop(reach: Reach) -> Connection | None:
    """A connection of the server's pool with a BLPOP on its queues' wake-up lists sent, or None."""
    pool = reach.server.connection.connection_pool
    try:
        connection = pool.get_connection()
    except RedisError as exc:
        reach.failed(exc)
        return None
    wakes = [reach.server.keys.wake(queue) for queue in reach.server.queues]
    try:
        connection.send_command("BLPOP", *wakes, IDLE_WAIT)  # type: ignore[no-untyped-call]
    except RedisError as exc:
        pool.release(connection)
        reach.failed(exc)
        return None
    return connection


def _read(connection: Connection, reach: Reach) -> None:
    try:
        connection.read_response()
    except RedisError as exc:  # the connection is closed on an error: it goes back to the pool clean
        reach.failed(exc)
