"""The work process: a long-lived child of the supervisor that claims and runs jobs one at a time.

It tells the supervisor over a pipe which job it is running and until when, so the supervisor can
extend the lease while it runs and hard-kill it if it overruns. A success is completed in the same
round trip as the next claim.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from redis import Redis
from redis.exceptions import RedisError

from .. import execution, registry, stats
from ..conf import jobs_settings
from ..outcomes import AttemptEnded
from ..store import Claimed, Finished, Store, wake_key
from .guard import ClaimBoard

logger = logging.getLogger("django_jobs.worker")

_PR_SET_PDEATHSIG = 1
#: ``runjobs --burst`` stays for scheduled jobs (retries, delayed jobs) due within this many seconds.
BURST_WAIT = 60.0


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a job never outlives its supervisor."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the getppid() check in the loop still stops us
        pass


@dataclass
class WorkProcess:
    """One claim-run-complete loop."""

    queues: Sequence[str]
    connection: Redis
    name: str
    report_fd: int
    burst: bool = False
    max_jobs: int = 0
    burst_wait: float = BURST_WAIT
    stopping: bool = False
    board: ClaimBoard | None = None  # where the lease guard reads the running attempt's claim time
    _on_term: Callable[[int, object], None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self.stopping = True

        # A plain function, not a bound method: ``signal.signal`` formats the repr of the handler it
        # replaces, and this dataclass's repr (its Redis client's included) would cost every job.
        self._on_term = stop

    def _report(self, line: str) -> None:
        os.write(self.report_fd, line.encode() + b"\n")

    def _post(self, claimed_ns: int) -> None:
        if self.board is not None:
            self.board.post(claimed_ns)

    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the supervisor, which decides

    def run(self) -> int:
        store = Store.of(self.connection)
        parent = os.getppid()
        nonce_base = uuid.uuid4().hex[:12]
        finished: Finished | None = None
        limits = registry.limits_json()  # the registry is complete once Django is set up
        done = 0
        backoff = 0.1
        while True:
            queues = [] if self.stopping or os.getppid() != parent else self.queues
            sent = time.monotonic_ns()  # the lease of what this claims runs from no earlier than now
            try:
                _, claimed = store.complete_and_claim(
                    queues,
                    finished=finished,
                    worker_name=self.name,
                    lease_seconds=jobs_settings.LEASE_SECONDS,
                    nonce=f"{nonce_base}{done}",
                    finished_ttl=jobs_settings.FINISHED_TTL,
                    limits=limits,
                )
                finished, backoff = None, 0.1
            except RedisError as exc:
                if finished is None and not queues:
                    return 0  # stopping and holding nothing: nothing needs Redis any more
                logger.warning("Redis unavailable (%s); retrying in %.1f s", exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if claimed is None:
                self._report("D")
                stats.flush(self.connection, every=0)
                if not queues or (self.burst and not self._due_soon(store)):
                    return 0
                self._wait()
                continue
            finished = self._attempt(store, claimed, sent)
            done += 1
            stats.flush(self.connection)
            if self.max_jobs and done >= self.max_jobs:
                self.stopping = True

    def _attempt(self, store: Store, claimed: Claimed, sent: int) -> Finished | None:
        """Run one claimed job under the lease guard; returns what the next claim completes."""
        self._post(sent)  # before anything else: from now on the lease guard watches this attempt

        def arm(timeout: float) -> None:
            self._report(f"S {claimed.token} {claimed.queue} {time.monotonic() + timeout:.3f} {sent}")

        ended = self._run(store, claimed, arm)
        self._post(0)  # the job's code is done: nothing left to kill for
        self.install_signals()  # a job may have replaced our handlers; shutdown must keep working
        finished = execution.completion(ended) if ended is not None else None
        self._report("C" if finished else "D")  # "C": ran; keep the lease alive until the completion lands
        return finished

    def _due_soon(self, store: Store) -> bool:
        """In burst mode: is a retry or delayed job of our queues due within ``burst_wait``? Then
        the supervisor's maintenance promotes it and this process stays to run it."""
        try:
            due = store.next_due(self.queues)
        except RedisError:
            return True  # cannot tell: keep trying, as the claim loop does
        return due is not None and due <= self.burst_wait

    def _run(self, store: Store, claimed: Claimed, arm: Callable[[float], None]) -> AttemptEnded | None:
        """Run one job. Whatever escapes (Redis down while settling, or a fault in the settling
        itself) costs this attempt, not the process: the lease expires and the job is retried."""
        try:
            # "R": the job returned; if this process dies from here on, the supervisor completes it.
            return execution.run(store, claimed, on_start=arm, on_return=lambda: self._report("R"))
        except RedisError as exc:
            logger.warning("Redis unavailable while settling job %s (%s)", claimed.id, exc)
        except BaseException:
            logger.exception("Could not settle job %s; it will be retried once its lease expires", claimed.id)
        return None

    def _wait(self) -> None:
        """Block until a wake token arrives or a second passes; the token itself carries nothing."""
        try:
            self.connection.blpop([wake_key(q) for q in self.queues], timeout=1)
        except RedisError:
            time.sleep(0.5)
