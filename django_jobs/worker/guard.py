"""The lease guard: a running attempt is killed before its lease can expire as seen from Redis.

A lease lives ``LEASE_SECONDS`` from the Redis time at which the claim or the last heartbeat ran,
which is no earlier than the moment that claim or heartbeat was *sent*. So an attempt whose last
successful renewal was sent more than a share of the lease ago (local monotonic clock, system-wide
on Linux, so a work process's claim time is comparable) may be about to lose its lease to a
reaper: it is killed first. A thread does the killing, so neither a frozen Redis nor a supervisor
loop blocked on a socket or the database can delay it; it only signals, never logs or touches
Redis, so it holds no lock a forked work process could inherit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass

#: The share of the lease after which an unrenewed attempt is killed: the rest is the margin for
#: the kill to land and for the clocks of this host and Redis to drift apart.
LEASE_SHARE = 0.8


@dataclass
class Watched:
    """A running attempt and the monotonic time its lease was last known to be renewed."""

    pid: int
    token: str
    queue: str
    renewed: float
    killed_at: float | None = None


class LeaseGuard:
    """Kills work processes whose attempt's lease may be about to expire."""

    def __init__(self, lease_seconds: float, share: float = LEASE_SHARE) -> None:
        self.allowance = lease_seconds * share
        self._watched: dict[int, Watched] = {}
        self._killed: list[Watched] = []
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="lease-guard", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join()

    def track(self, running: Iterable[tuple[int, str, str, float]]) -> None:
        """The attempts running now, as ``(pid, token, queue, claim sent at)``; others are forgotten."""
        with self._wake:
            tracked = {}
            for pid, token, queue, claimed in running:
                current = self._watched.get(pid)
                same = current is not None and current.token == token
                tracked[pid] = (
                    current if current is not None and same else Watched(pid, token, queue, claimed)
                )
            self._watched = tracked
            self._wake.notify()

    def renewed(self, tokens: Collection[str], sent: float) -> None:
        """A heartbeat sent at ``sent`` (monotonic) extended the leases of ``tokens``."""
        with self._wake:
            for watched in self._watched.values():
                if watched.token in tokens:
                    watched.renewed = max(watched.renewed, sent)

    def killed(self) -> list[Watched]:
        """The attempts killed since the last call, for the supervisor to log and count."""
        with self._wake:
            killed, self._killed = self._killed, []
        return killed

    def _run(self) -> None:
        with self._wake:
            while not self._stopped:
                self._wake.wait(self._kill_overdue(time.monotonic()))

    def _kill_overdue(self, now: float) -> float:
        """Kill every overdue attempt; return the seconds until the next one falls due."""
        due = []
        for watched in self._watched.values():
            if watched.killed_at is not None:
                continue
            if now >= watched.renewed + self.allowance:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(watched.pid, signal.SIGKILL)
                watched.killed_at = now
                self._killed.append(watched)
            else:
                due.append(watched.renewed + self.allowance - now)
        return max(min(due, default=1.0), 0.01)
