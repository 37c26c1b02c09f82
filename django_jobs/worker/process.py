"""The work process: a long-lived child of the supervisor that claims and runs jobs one at a time
(with ``JOBS["ASYNC_JOBS"]`` above 1, its ``async def`` jobs side by side in lanes: ``lanes``).

It tells the supervisor over a pipe which job it is running and until when, so the supervisor can
extend the lease while it runs and hard-kill it if it overruns. A success is completed in the same
round trip as the next claim. For a while after a Redis failover, a job that already ran is ended
without running again (``rerun``).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's own, under signal: the handler as it is
import contextlib
import ctypes
import logging
import os
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connections
from redis import Redis
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core import execution, tracing
from django_jobs.core.outcomes import AttemptEnded
from django_jobs.flow.pausing import Held, Plan
from django_jobs.store import Claimed, Finished, Store
from django_jobs.telemetry import history, stats
from django_jobs.worker import protocol, rerun
from django_jobs.worker.batching import Pace, split
from django_jobs.worker.guard import ClaimBoard
from django_jobs.worker.lanes import Lanes, is_async
from django_jobs.worker.protocol import WIRE, Mark, encode_started
from django_jobs.worker.servers import IDLE_WAIT, Reach, Server, soonest_retry, wait_any

logger = logging.getLogger("django_jobs.worker")

_PR_SET_PDEATHSIG = 1
#: ``runjobs --burst`` stays for scheduled jobs (retries, delayed jobs) due within this many seconds.
BURST_WAIT = 60.0
#: The exit code of a work process that ran its ``--max-jobs``: the supervisor starts another in its place.
RECYCLED = 3
#: Seconds a server whose queues were found empty is left out of the claims of a process that
#: another server keeps busy: a job pushed there meanwhile waits at most this long (an idle process
#: of this ``runjobs``, blocked on every server's wake-up list, takes it at once).
DRAINED_PAUSE = 0.02
#: A claim that only completes the last job: no queue asked.
_COMPLETE_ONLY = Plan([], "{}", frozenset())
#: The reports that carry nothing but their kind, as sent: a plain job's cost no encoding.
_RETURNED, _RAISED = WIRE[Mark.RETURNED], WIRE[Mark.RAISED]
_COMPLETING, _DONE, _LANDED = WIRE[Mark.COMPLETING], WIRE[Mark.DONE], WIRE[Mark.LANDED]


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a job never outlives its supervisor."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the getppid() check in the loop still stops us
        pass


@dataclass
class Served:
    """One Redis server of a work process: its store, whether it answers, and the success of its last
    job, completed in the same round trip as the next claim on that server."""

    store: Store
    reach: Reach
    held: Held  # its paused queues and job types, read once a second
    finished: list[Finished] = field(default_factory=list)  # its successes the next claim completes
    drained_until: float = 0.0  # while another server keeps the process busy, not asked before this

    @property
    def queues(self) -> tuple[str, ...]:
        return self.reach.server.queues

    @classmethod
    def of(cls, server: Server, on_change: Callable[[bool], None] | None = None) -> Served:
        """A server as a work process serves it; the registry must be complete (Django set up).
        ``on_change(up)``: hears when the server stops or starts answering again."""
        store = Store.of(server.connection, server.keys)
        return cls(store, Reach(server, on_change), Held(store, server.queues))

    def unpaused(self) -> list[str]:
        """Its queues a claim asks, in order: the paused ones are left out."""
        return self.held.claim().queues


@dataclass
class WorkProcess:
    """One claim-run-complete loop over the queues of one or more Redis servers.

    Each claim asks the servers in the order of their first queue, each for its queues in the order
    given, until one hands out a job. A server that fails is skipped (see ``servers.Reach``) and the
    others keep being served.
    """

    servers: Sequence[Server]
    name: str
    report_fd: int
    burst: bool = False
    max_jobs: int = 0
    burst_wait: float = BURST_WAIT
    stopping: bool = False
    board: ClaimBoard | None = None  # where the lease guard reads the running attempt's claim time
    window: rerun.Window | None = None  # while open, a "ledger" job is looked up before it runs
    async_jobs: int = 1  # above 1: that many lanes run async def jobs side by side (needs a board)
    lanes: Lanes | None = field(default=None, init=False, repr=False)
    pace: Pace = field(default_factory=lambda: Pace(1), init=False, repr=False)
    queued: deque[tuple[Served, Claimed]] = field(default_factory=deque, init=False, repr=False)
    batched: bool = field(default=False, init=False, repr=False)  # the supervisor was told of a batch
    _on_term: Callable[[int, object], None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self.stopping = True

        # A plain function, not a bound method: ``signal.signal`` formats the repr of the handler it
        # replaces, and this dataclass's repr (its Redis client's included) would cost every job.
        self._on_term = stop
        if self.async_jobs > 1 and self.board is not None:
            self.lanes = Lanes(self.async_jobs, self.report_fd, self.board)
        else:  # lanes take async jobs one claim at a time: batches are for the main thread alone
            self.pace = Pace(jobs_settings.CLAIM_BATCH)

    def _report(self, wire: bytes) -> None:
        """Send one report (``protocol``'s wire form) to the supervisor."""
        os.write(self.report_fd, wire)

    def _post(self, claimed_ns: int) -> None:
        if self.board is not None:
            self.board.post(claimed_ns)

    def install_signals(self) -> None:
        """SIGTERM stops the loop, Ctrl-C is the supervisor's to decide, SIGALRM is the soft timeout's;
        each is set only if it is not already (after a job, to undo whatever the job installed).

        The handler in place is read raw (``_signal.getsignal``: a function, or SIG_DFL and SIG_IGN as
        their numbers, which equal the ``Handlers``): ``signal.getsignal`` first tries to make it a
        ``Handlers`` member, which for a function raises and catches a ValueError, 1.7 us a signal."""
        wanted = (
            (signal.SIGTERM, self._on_term),
            (signal.SIGINT, signal.SIG_IGN),
            (signal.SIGALRM, execution.expire),
        )
        for signum, handler in wanted:
            if _signal.getsignal(signum) != handler:
                signal.signal(signum, handler)

    def run(self) -> int:
        execution.keep_alarm()  # install_signals runs before the first job and after each one
        served = [Served.of(server, self._answers) for server in self.servers]
        self._warm_up(served)
        by_queue = {queue: one for one in served for queue in one.queues}

        def where(queue: str) -> Redis | None:
            """The Redis an outcome count of ``queue`` goes to: its server's, unless that one is down."""
            one = by_queue.get(queue, served[0])
            return None if one.reach.down else one.store.connection

        parent = os.getppid()
        nonce_base = uuid.uuid4().hex[:12]
        done = 0
        if self.lanes is not None:
            self.lanes.start()
        sent = 0
        while True:
            if self.queued:  # the next job of the batch in hand: its lease runs from the batch's claim
                one, claimed = self.queued.popleft()
            else:
                stopping = self.stopping or os.getppid() != parent  # once per claim, not per job
                if self._lanes_full(served, f"{nonce_base}{done}c", where):
                    continue
                sent = time.monotonic_ns()  # the lease of what this claims runs from no earlier than now
                got = self._claim(served, stopping, f"{nonce_base}{done}", done, sent)
                if got is None:
                    if self._idle(served, stopping, where):
                        return RECYCLED if self.max_jobs and done >= self.max_jobs else 0
                    continue
                one, claimed = got
            if self._ran_before(one, claimed):
                continue
            done += 1
            if self.lanes is not None and is_async(claimed):
                self.lanes.hand(one.store, claimed, sent)
            else:
                began = time.perf_counter()
                finished = self._attempt(one.store, claimed, sent)
                self.pace.ran(time.perf_counter() - began)
                if finished is not None:
                    self._finished(one, finished)
            stats.flush(where)
            history.flush()
            if self.max_jobs and done >= self.max_jobs:
                self.stopping = True

    def _finished(self, one: Served, finished: Finished) -> None:
        """Keep a success for the next claim to complete; one with a result, while jobs of its batch
        are still to run, is completed now: its result dies with the process if a later job of the
        batch kills it (the supervisor can complete the job, not keep what it returned)."""
        if finished.result is None or not self.queued:
            one.finished.append(finished)
            return
        try:
            one.store.complete(finished, jobs_settings.FINISHED_TTL)
        except RedisError as exc:
            one.reach.failed(exc)
            one.finished.append(finished)
            return
        self._report(_DONE)  # its completion landed: the supervisor keeps no lease for it

    def _answers(self, up: bool) -> None:
        """A server answers again after failing: it may be another one now (a failover), holding jobs
        that already ran."""
        if up and self.window is not None:
            self.window.open()

    def _ran_before(self, one: Served, claimed: Claimed) -> bool:
        """While the window is open: whether the job already ran (``rerun``); if so, it is ended here
        without running. If that fails, its lease expires and whoever claims it next looks again."""
        if self.window is None or not self.window.is_open():
            return False
        ended = rerun.already_ran(claimed)
        if ended is None:
            return False
        try:
            rerun.end(one.store, claimed, ended)
        except RedisError as exc:
            one.reach.failed(exc)
        except DatabaseError as exc:
            logger.warning("Could not end job %s, which already ran (%s).", claimed.id, exc)
        return True

    @staticmethod
    def _warm_up(served: Sequence[Served]) -> None:
        """Pay what a fresh process pays once before its first claim, not in its first job: the
        database connections the supervisor closed at the fork, and each Redis server's. One that
        fails is left to the attempt, as between jobs."""
        for conn in connections.all(initialized_only=True):
            with contextlib.suppress(DatabaseError):
                conn.ensure_connection()
        for one in served:
            one.held.claim()  # connects to its Redis and reads what is paused (a failure is left for later)

    def _lanes_full(self, served: Sequence[Served], nonce: str, where: Callable[[str], Redis | None]) -> bool:
        """With every lane busy, claim nothing (the job could be one more ``async def`` one): complete
        the main thread's last success, then wait a moment for a lane. True if it waited."""
        if self.lanes is None or self.lanes.free() is not None:
            return False
        if any(one.finished for one in served):
            self._claim(served, True, nonce)
            if not any(one.finished for one in served):
                self._report(_DONE)
        stats.flush(where)
        history.flush()
        self.lanes.wait_free(IDLE_WAIT)
        return True

    def _idle(self, served: Sequence[Served], stopping: bool, where: Callable[[str], Redis | None]) -> bool:
        """No job was claimed: True if this process is done, else wait for one. A completion whose
        server did not answer keeps the process (and its lease, in the supervisor) until it lands;
        so does a lane's running job."""
        pending = any(one.finished for one in served)
        if not pending:
            self._report(_DONE)
        stats.flush(where, every=0)
        # history rows at their usual pace even when idle between jobs (each write is a database
        # write: one per job at a low rate would contend with enqueues for the database), all when stopping
        history.flush(every=0 if stopping else history.FLUSH_EVERY)
        laned = self.lanes is not None and self.lanes.busy()
        if stopping:
            if not pending and not laned:
                return True
            waiting = [one.reach for one in served if one.finished]
            time.sleep((soonest_retry(waiting) if waiting else 0.0) or 0.05)
            return False
        if self.burst and not pending and not laned and not self._due_soon(served):
            return True
        self._wait(served)
        return False

    def _claim(
        self, served: Sequence[Served], stopping: bool, nonce: str, done: int = 0, sent: int = 0
    ) -> tuple[Served, Claimed] | None:
        """Complete each server's finished jobs and claim the next job (or batch: ``batching``; the
        rest of it is queued here) from the first server that has one, each server in one round trip.
        Once a job is claimed (or while stopping), later servers are only asked to complete theirs.
        ``done``: jobs this process ran so far (a batch never takes it past ``--max-jobs``); ``sent``:
        when this claim was sent (``time.monotonic_ns()``), from which the leases it takes run.

        A server found drained is left out of the claims for ``DRAINED_PAUSE`` while another keeps
        this process busy, so it costs a busy process one empty round trip per pause, not one per
        job; when no other server has a job, it is asked again at once, before any idle wait."""
        now = time.monotonic()
        want = self.pace.want(self.max_jobs - done if self.max_jobs else 0)
        resting = [one for one in served if one.drained_until > now]
        got = self._ask(served, stopping, nonce, now, want)
        if got is None and resting and not stopping:
            for one in resting:
                one.drained_until = 0.0
            got = self._ask(resting, stopping, nonce, now, want)
        if self.batched and not any(one.finished for one in served):
            self._report(_LANDED)  # the last batch is over: its completions landed
            self.batched = False
        if got is None:
            return None
        one, leased = got
        if len(leased) > 1:
            self._report(b"".join(protocol.encode(protocol.Held(c.token, c.queue, sent)) for c in leased[1:]))
            self.queued.extend((one, claimed) for claimed in leased[1:])
            self.batched = True
        return one, leased[0]

    def _ask(
        self, served: Sequence[Served], stopping: bool, nonce: str, now: float, want: int
    ) -> tuple[Served, tuple[Claimed, ...]] | None:
        got: tuple[Served, tuple[Claimed, ...]] | None = None
        several = len(self.servers) > 1
        for one in served:
            asking = got is None and not stopping and one.drained_until <= now
            plan = one.held.claim() if asking else _COMPLETE_ONLY
            if not (plan.queues or one.finished) or not one.reach.up():
                continue
            try:
                first, also, scoped = split(one.finished)
                for alone in scoped:  # more than one key's scope: those past the first, one by one
                    one.store.complete(alone, jobs_settings.FINISHED_TTL)
                claim = one.store.claim_batch(
                    plan.queues,
                    finished=first,
                    worker_name=self.name,
                    lease_seconds=jobs_settings.LEASE_SECONDS,
                    nonce=nonce,
                    finished_ttl=jobs_settings.FINISHED_TTL,
                    limits=plan.limits,
                    prioritized=plan.prioritized,
                    want=want if asking else 1,
                    also=also,
                )
            except RedisError as exc:
                one.reach.failed(exc)
                continue
            one.finished = []
            one.reach.ok()
            execution.publish_expired(one.store, claim.expired)
            if claim.leased:
                got = (one, claim.leased)
            elif several and plan.queues:
                one.drained_until = now + DRAINED_PAUSE
        return got

    def _attempt(self, store: Store, claimed: Claimed, sent: int) -> Finished | None:
        """Run one claimed job under the lease guard; returns what the next claim completes."""
        self._post(sent)  # before anything else: from now on the lease guard watches this attempt

        def arm(timeout: float) -> None:
            self._report(encode_started(claimed.token, claimed.queue, time.monotonic() + timeout, sent))

        ended = self._run(store, claimed, arm)
        self._post(0)  # the job's code is done, or never ran (an undecodable job): nothing to kill for
        self.install_signals()  # a job may have replaced our handlers; shutdown must keep working
        finished = execution.completion(ended) if ended is not None else None
        self._report(_COMPLETING if finished else _DONE)  # keep the lease alive until the completion lands
        if tracing.active():  # its span now, not batched: a SIGKILL of this process would lose it
            tracing.flush(tracing.FLUSH_MILLIS)
        return finished

    def _ended(self, returned: bool) -> None:
        """The job's code is done: the lease guard stops watching (settling the end may wait on a
        database or a hook as long as it must), and the supervisor learns that it returned (if this
        process dies from here on, the supervisor completes the job) or raised."""
        self._post(0)
        self._report(_RETURNED if returned else _RAISED)

    def _due_soon(self, served: Sequence[Served]) -> bool:
        """In burst mode: is a retry or delayed job of our unpaused queues due within ``burst_wait``?
        Then the supervisor's maintenance promotes it and this process stays to run it."""
        for one in served:
            queues = one.unpaused()
            if not queues:
                continue
            if one.reach.down:
                return True  # cannot tell: keep trying, as the claim loop does
            try:
                due = one.store.next_due(queues)
            except RedisError:
                return True
            if due is not None and due <= self.burst_wait:
                return True
        return False

    def _run(self, store: Store, claimed: Claimed, arm: Callable[[float], None]) -> AttemptEnded | None:
        """Run one job. Whatever escapes (Redis down while settling, or a fault in the settling
        itself) costs this attempt, not the process: the lease expires and the job is retried."""
        try:
            return execution.run(store, claimed, on_start=arm, on_end=self._ended)
        except RedisError as exc:
            logger.warning("Redis unavailable while settling job %s (%s)", claimed.id, exc)
        except BaseException:
            logger.exception("Could not settle job %s; it will be retried once its lease expires", claimed.id)
        return None

    @staticmethod
    def _wait(served: Sequence[Served]) -> None:
        """Block until a wake token arrives or a second passes; the token itself carries nothing.
        With one Redis server, one BLPOP on its unpaused queues (with every queue paused, just the
        second); with several, one per server at once (``servers.wait_any``)."""
        if len(served) > 1:
            wait_any([one.reach for one in served])
            return
        (one,) = served
        queues = one.unpaused()
        if not queues:
            time.sleep(IDLE_WAIT)
            return
        if not one.reach.up():
            time.sleep(min(soonest_retry([one.reach]), IDLE_WAIT))
            return
        try:
            one.store.connection.blpop([one.store.keys.wake(q) for q in queues], timeout=IDLE_WAIT)
        except RedisError as exc:
            one.reach.failed(exc)
