"""Leases from the supervisor's side: a heartbeat thread renews them, and the lease guard kills a
running attempt before its lease can expire as seen from Redis.

A lease lives ``LEASE_SECONDS`` from the Redis time at which its claim or last heartbeat ran, which
is no earlier than the moment that claim or heartbeat was *sent*. So an attempt whose last renewal
was sent more than a share of the lease ago may be about to lose its lease to a reaper: it is
killed first. Times are read on the monotonic clock, which Linux shares between processes.

The guard waits for nothing, not Redis, the database or the supervisor's loop: each work process
writes the claim time of its running attempt to a shared-memory board the moment its claim returns,
and a thread reads the boards and kills through a pidfd (never a recycled pid). The heartbeats have
a thread of their own too, so a supervisor loop busy with the database (a long prune, a slow relay)
does not let healthy attempts go unrenewed and be killed.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import struct
import threading
import time
from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from django_jobs.store import Store

logger = logging.getLogger("django_jobs.worker")

#: The share of the lease after which an unrenewed attempt is killed: the rest is the margin for
#: the kill to land and for the clocks of this host and Redis to drift apart.
LEASE_SHARE = 0.8
_SLOT = struct.Struct("qq")


class ClaimBoard:
    """Shared memory in which one work process posts the claim time of the attempt each of its lanes
    runs (lane 0: its main thread), and in which its supervisor asks a lane to stop its attempt."""

    def __init__(self, lanes: int = 1) -> None:
        self.lanes = lanes
        # anonymous and shared: it survives fork. Per lane: its claim, then a cancel request.
        self._memory = mmap.mmap(-1, _SLOT.size * 2 * lanes)

    def post(self, claimed_ns: int, lane: int = 0) -> None:
        """``claimed_ns``: when the running attempt's claim was sent (``time.monotonic_ns()``); 0: none."""
        # twice: a torn read shows as a mismatch
        _SLOT.pack_into(self._memory, _SLOT.size * 2 * lane, claimed_ns, claimed_ns)

    def read(self, lane: int = 0) -> int | None:
        """The posted claim time, 0 if no attempt runs, None while a write is under way."""
        first, second = _SLOT.unpack_from(self._memory, _SLOT.size * 2 * lane)
        return int(first) if first == second else None

    def ask_to_stop(self, lane: int, claimed_ns: int) -> None:
        """The supervisor asks ``lane`` to stop the attempt claimed at ``claimed_ns`` (its cancel)."""
        _SLOT.pack_into(self._memory, _SLOT.size * (2 * lane + 1), claimed_ns, claimed_ns)

    def stop_asked(self, lane: int) -> int:
        """The claim time of the attempt ``lane`` was asked to stop; 0 if none (or mid-write)."""
        first, second = _SLOT.unpack_from(self._memory, _SLOT.size * (2 * lane + 1))
        return int(first) if first == second else 0

    def close(self) -> None:
        self._memory.close()


@dataclass
class Watched:
    """One work process: its board, how to kill it, and the latest renewal of each attempt its lanes
    run (claim ns -> sent ns)."""

    board: ClaimBoard
    pidfd: int | None
    renewals: dict[int, int] = field(default_factory=dict)
    killed_claim: int = 0


@dataclass(frozen=True)
class Killed:
    """An attempt the guard killed, for the supervisor to log and count."""

    pid: int
    claimed_ns: int
    silent_for: float  # seconds since its claim or last renewal was sent


class _Periodic:
    """A daemon thread that calls :meth:`tick` every ``interval`` seconds until stopped."""

    def __init__(self, name: str, interval: float) -> None:
        self.interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: bool = True) -> None:
        self._stopped.set()
        if wait and self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self.tick()
            self._stopped.wait(self.interval)

    def tick(self) -> None:
        raise NotImplementedError


class LeaseGuard(_Periodic):
    """Kills work processes whose running attempt's lease may be about to expire."""

    def __init__(self, lease_seconds: float, share: float = LEASE_SHARE) -> None:
        super().__init__("lease-guard", min(0.05, lease_seconds * share / 10))
        self.allowance_ns = int(lease_seconds * share * 1e9)
        self._watched: dict[int, Watched] = {}
        self._killed: list[Killed] = []
        self._lock = threading.Lock()

    def add(self, pid: int, board: ClaimBoard) -> None:
        """Guard a freshly forked work process that posts to ``board``."""
        pidfd = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfd (not Linux): os.kill then
            pidfd = os.pidfd_open(pid)
        with self._lock:
            self._watched[pid] = Watched(board, pidfd)

    def retain(self, pids: Collection[int]) -> None:
        """Forget the work processes not in ``pids`` (they exited)."""
        with self._lock:
            for pid in [pid for pid in self._watched if pid not in pids]:
                watched = self._watched.pop(pid)
                if watched.pidfd is not None:
                    os.close(watched.pidfd)
                watched.board.close()

    def renewed(self, pid: int, claimed_ns: int, sent_ns: int) -> None:
        """A heartbeat sent at ``sent_ns`` renewed the lease of the attempt claimed at ``claimed_ns``."""
        with self._lock:
            watched = self._watched.get(pid)
            if watched is not None and sent_ns > watched.renewals.get(claimed_ns, 0):
                watched.renewals[claimed_ns] = sent_ns

    def killed(self) -> list[Killed]:
        """The attempts killed since the last call."""
        with self._lock:
            killed, self._killed = self._killed, []
        return killed

    def tick(self) -> None:
        with self._lock:
            for pid, watched in self._watched.items():
                self._check(pid, watched, time.monotonic_ns())

    def _check(self, pid: int, watched: Watched, now: int) -> None:
        posted = [watched.board.read(lane) for lane in range(watched.board.lanes)]
        if len(watched.renewals) > len(posted):  # forget the renewals of attempts that ended
            watched.renewals = {claim: sent for claim, sent in watched.renewals.items() if claim in posted}
        for claimed in posted:
            if not claimed or claimed == watched.killed_claim:
                continue  # idle, completing, mid-write, or already killed
            since = max(claimed, watched.renewals.get(claimed, 0))
            if now >= since + self.allowance_ns:
                self._kill(pid, watched, claimed, (now - since) / 1e9)
                return

    def _kill(self, pid: int, watched: Watched, claimed: int, silent_for: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            if watched.pidfd is not None:
                signal.pidfd_send_signal(watched.pidfd, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        watched.killed_claim = claimed
        self._killed.append(Killed(pid, claimed, silent_for))


class Heartbeat(_Periodic):
    """Renews the leases of the attempts the supervisor published, every third of a lease, and
    learns which of them were asked to stop (their cancel was requested)."""

    def __init__(self, store: Store, guard: LeaseGuard, lease_seconds: float) -> None:
        super().__init__("heartbeat", lease_seconds / 3)
        self.store, self.guard, self.lease = store, guard, lease_seconds
        self._attempts: list[tuple[int, str, int | None]] = []
        self._gone: deque[set[str]] = deque()
        self._cancels: deque[set[str]] = deque()

    def publish(self, attempts: Iterable[tuple[int, str, int | None]]) -> None:
        """The leases to keep: ``(pid, token, claim sent at in ns)`` of every attempt held now."""
        self._attempts = list(attempts)  # one reference swap: the thread reads whole lists only

    def gone(self) -> list[set[str]]:
        """Per heartbeat since the last call, the tokens whose lease was no longer there."""
        results = []
        while self._gone:
            results.append(self._gone.popleft())
        return results

    def cancels(self) -> set[str]:
        """The tokens whose job carried a cancel request at a heartbeat since the last call."""
        found: set[str] = set()
        while self._cancels:
            found |= self._cancels.popleft()
        return found

    def tick(self) -> None:
        attempts = self._attempts
        if not attempts:
            return
        sent = time.monotonic_ns()  # the renewed leases run from a Redis time no earlier than this
        try:
            beat = self.store.heartbeat([token for _, token, _ in attempts], self.lease)
        except RedisError as exc:
            logger.warning("Heartbeat failed (%s); retrying.", exc)
            return
        for pid, token, claimed in attempts:
            if token not in beat.gone and claimed is not None:
                self.guard.renewed(pid, claimed, sent)
        self._gone.append(beat.gone)
        if beat.cancelled:
            self._cancels.append(beat.cancelled)
