"""The supervisor: owns the work processes, keeps their jobs' leases alive, enforces hard
timeouts, settles what a dead child left behind, and runs the maintenance duties.

It never runs job code itself, so a job stuck in C code or ignoring signals cannot stop it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from django.db import connections
from redis import Redis
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core import execution, outcomes, registry, tracing
from django_jobs.exceptions import JobCancelled, JobTimeout, WorkerLost
from django_jobs.store import Claimed, Finished, Settled, Store, keys, rq_timestamp, split_token
from django_jobs.store.lifecycle import RUNJOBS_MARK
from django_jobs.telemetry import history, metrics, stats
from django_jobs.telemetry.logs import redis_location
from django_jobs.worker.duties.base import guarded
from django_jobs.worker.guard import ClaimBoard, Heartbeat, LeaseGuard
from django_jobs.worker.ledger import Ledger
from django_jobs.worker.maintenance import Maintenance
from django_jobs.worker.process import BURST_WAIT, RECYCLED, WorkProcess, die_with_parent
from django_jobs.worker.rerun import Window
from django_jobs.worker.servers import Reach, Server
from django_jobs.worker.slot import DEADLINED, STOPPABLE, Event, Settlement, Slot, State

logger = logging.getLogger("django_jobs.worker")

#: Respawns slow down once more work processes than ``concurrency`` died in this many seconds ...
RESPAWN_WINDOW = 10.0
#: ... waiting this long before the first respawn too many, doubling up to RESPAWN_MAX_DELAY.
RESPAWN_DELAY = 0.05
RESPAWN_MAX_DELAY = 0.5
#: Seconds between maintenance passes at the least (or ``MAINTENANCE_INTERVAL`` if shorter): reports
#: wake the loop hundreds of times a second while jobs run, and ``Every`` paces each duty on its own.
MAINTAIN_EVERY = 0.05
#: Seconds the loop lets work processes' reports pile up once one arrives: each report only moves a
#: deadline or a lease the supervisor keeps for seconds, and each wake-up costs CPU the jobs need.
REPORT_PAUSE = 0.02
#: Seconds between deletions of the ledger rows of jobs whose code returned: one statement per pass,
#: well before a failover could hand such a job out again; after a failure (the database is down),
#: SETTLE_RAN_RETRY.
SETTLE_RAN_EVERY = 0.1
SETTLE_RAN_RETRY = 1.0


@dataclass
class Shard:
    """One Redis server this runjobs serves, with what it keeps per server: its store (leases, lost,
    dying, vanished, stats and alert windows live there), its maintenance, its own lease heartbeat
    thread, and whether it answers. A server that does not answer costs only its own queues."""

    server: Server
    store: Store
    maintenance: Maintenance
    heartbeat: Heartbeat
    reach: Reach

    @property
    def queues(self) -> tuple[str, ...]:
        return self.server.queues

    @property
    def ledger(self) -> Ledger:
        return self.maintenance.ledger


class Supervisor:
    """``runjobs``: N work processes plus the duties every runjobs shares, per Redis server."""

    def __init__(
        self,
        servers: Sequence[Server],
        *,
        concurrency: int = 1,
        burst: bool = False,
        max_jobs: int = 0,
        burst_wait: float = BURST_WAIT,
        async_jobs: int = 1,
    ) -> None:
        self.servers = list(servers)
        self.async_jobs = async_jobs  # above 1: each work process runs that many lanes of async jobs
        self.boards: dict[int, ClaimBoard] = {}  # each work process's claim board, by pid
        self.queues = [queue for server in self.servers for queue in server.queues]
        self.concurrency, self.burst, self.max_jobs = concurrency, burst, max_jobs
        self.burst_wait = burst_wait
        self.slots: dict[int, Slot] = {}
        self.stopping = False
        self.stop_by: float | None = None
        self.deaths: list[float] = []  # work processes that died holding no job: start-up failures
        self.exits: list[float] = []  # every abnormal exit, job-holding ones too: paces respawns
        self.respawn_at: list[float] = []
        self.fatal: str | None = None
        self.hostname = socket.gethostname()
        self._next_heartbeat = 0.0
        self._maintain_at = 0.0
        self._settle_ran_at = 0.0
        self.guard = LeaseGuard(jobs_settings.LEASE_SECONDS)
        self.window = Window()  # shared with the work processes: look for jobs that already ran
        self.shards = [self._shard(server, lead=n == 0) for n, server in enumerate(self.servers)]
        self.shard_of = {queue: shard for shard in self.shards for queue in shard.queues}

    def _shard(self, server: Server, lead: bool) -> Shard:
        store = Store.of(server.connection, server.keys)
        maintenance = Maintenance(store, server.queues, jobs_settings.MAINTENANCE_INTERVAL, lead=lead)
        maintenance.ledger.on_change = self.window.open
        heartbeat = Heartbeat(store, self.guard, jobs_settings.LEASE_SECONDS)
        reach = Reach(server, functools.partial(metrics.redis_up, server.name))
        return Shard(server, store, maintenance, heartbeat, reach)

    # --- signals ---------------------------------------------------------------------------------

    def _on_term(self, signum: int, frame: object) -> None:
        if self.stopping:
            logger.warning("Second stop signal: handing running jobs back to their queues now.")
            self.stop_by = 0.0
            return
        logger.info("Stopping: finishing running jobs (up to %.0f s).", jobs_settings.SHUTDOWN_GRACE)
        self.stopping = True
        self.stop_by = time.monotonic() + jobs_settings.SHUTDOWN_GRACE
        for slot in self.slots.values():
            self._signal(slot.pid, signal.SIGTERM)

    @staticmethod
    def _signal(pid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    # --- children --------------------------------------------------------------------------------

    def _spawn(self) -> None:
        connections.close_all()  # a child must not share the parent's database sockets
        read_fd, write_fd = os.pipe()
        board = ClaimBoard(1 + (self.async_jobs if self.async_jobs > 1 else 0))  # a row per lane
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(read_fd)
                for slot in self.slots.values():
                    os.close(slot.fd)
                die_with_parent()
                stats.forget()
                history.forget()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                work = WorkProcess(
                    self.servers,
                    f"{self.hostname}.{os.getpid()}",
                    write_fd,
                    burst=self.burst,
                    burst_wait=self.burst_wait,
                    max_jobs=self.max_jobs,
                    board=board,
                    window=self.window,
                    async_jobs=self.async_jobs,
                )
                work.install_signals()
                code = work.run()
            except BaseException:
                logger.exception("Work process crashed")
            finally:
                tracing.flush()  # os._exit runs no exit handler: export the last spans first
                os._exit(code)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.guard.add(pid, board)
        self.boards[pid] = board
        self.slots[pid] = Slot(pid, read_fd, f"{self.hostname}.{pid}")

    def _read(self, timeout: float) -> None:
        fds = {slot.fd: slot for slot in self.slots.values()}
        try:
            ready, _, _ = select.select(list(fds), [], [], timeout)
            if ready and not self.stopping:
                # Let reports pile up for a moment rather than waking two or three times per job.
                time.sleep(REPORT_PAUSE)
                ready, _, _ = select.select(list(fds), [], [], 0)
        except InterruptedError:
            return
        for fd in ready:
            self._drain(fds[fd])

    @staticmethod
    def _drain(slot: Slot) -> None:
        while True:
            try:
                chunk = os.read(slot.fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                return
            slot.feed(chunk)

    def _reap_children(self) -> None:
        while self.slots:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.slots.pop(pid, None)
            if slot is None:
                continue
            metrics.retire(pid)
            self._drain(slot)
            self._note_attempts([slot])  # its last reports
            os.close(slot.fd)
            self.boards.pop(pid, None)
            self._unregister(slot)
            code = os.waitstatus_to_exitcode(status)
            holding = any(lane.attempt is not None for lane in slot.every())
            for lane in slot.every():  # each lane's attempt, settled by its own state
                settlement = lane.settlement
                lane.on(Event.EXIT)
                if settlement is not Settlement.NOTHING:
                    self._settle_orphan(lane, settlement)
            recycled = code == RECYCLED and not holding  # it ran its --max-jobs: replaced, like any exit
            if (code != 0 and not recycled) or holding:
                now = time.monotonic()
                self.exits.append(now)
                if not holding:
                    # A job that kills its process is the job's failure, counted in its own attempts;
                    # only a process dying on its own (a broken start-up) counts toward giving up.
                    self.deaths.append(now)
                tokens = ", ".join(lane.token for lane in slot.every() if lane.token)
                held = f" holding job {tokens}" if holding else ""
                logger.warning("Work process %d exited with %s%s", pid, code, held)
            if not self.stopping and (code != 0 or holding or not self.burst):
                self._respawn()  # in burst mode, a work process that exits 0 found nothing left to run

    def _respawn(self) -> None:
        now = time.monotonic()
        self.deaths = [t for t in self.deaths if now - t < 60]
        if len(self.deaths) > 10 * self.concurrency:
            self.fatal = f"work processes died {len(self.deaths)} times in a minute"
            self.stopping, self.stop_by = True, 0.0
            return
        self.exits = [t for t in self.exits if now - t < RESPAWN_WINDOW]
        surplus = len(self.exits) - self.concurrency
        delay = min(RESPAWN_DELAY * 2 ** min(surplus, 10), RESPAWN_MAX_DELAY) if surplus > 0 else 0.0
        self.respawn_at.append(now + delay)  # processes that keep dying must not fork-storm

    def _respawn_due(self, now: float) -> None:
        due = [t for t in self.respawn_at if t <= now]
        self.respawn_at = [t for t in self.respawn_at if t > now]
        for _ in due:
            self._spawn()

    def _settle_orphan(self, slot: Slot, settlement: Settlement) -> None:
        """A child died holding a job: time it out, hand it back, complete it, cancel it, or count it lost."""
        assert slot.attempt is not None
        shard = self.shard_of[slot.attempt.queue]
        if not shard.reach.up():
            logger.warning(
                "Could not settle job %s now (its Redis is down); its lease will be reaped.", slot.token
            )
            return
        try:
            self._settle(shard.store, slot, settlement)
        except Exception as error:  # Redis down, or anything else: never fatal to runjobs
            # The lease is still in Redis: when it expires, the reaper settles the job instead.
            logger.warning(
                "Could not settle job %s now (%s); its lease will expire and be reaped.",
                slot.token,
                error,
                exc_info=not isinstance(error, RedisError),
            )
            if isinstance(error, RedisError):
                shard.reach.failed(error)

    def _settle(self, store: Store, slot: Slot, settlement: Settlement) -> None:
        """Settle the attempt of a child that died, on its job's Redis. Its key's slot (``limit_key``)
        is kept by a job handed back, and passed on by one that ends."""
        assert slot.attempt is not None
        token, queue = slot.attempt.token, slot.attempt.queue
        if settlement in (Settlement.COMPLETE, Settlement.COMPLETION, Settlement.HAND_BACK):
            claimed, ttl = self._claimed(store, slot), jobs_settings.FINISHED_TTL
            scope = registry.limit_scope(claimed.record)
            if settlement is Settlement.HAND_BACK:  # its attempt is given back: no end, unless cancelled
                if store.release(token, queue, ttl, scope) is Settled.CANCELLED:
                    stopped = JobCancelled("The job was cancelled while runjobs was stopping.")
                    outcomes.publish(execution.cancelled(store, claimed, stopped))
                return
            # it succeeded; the return value died with the process: finished without its result, and
            # published here unless the process had published it (a fenced completion: by nobody)
            completed = store.complete(Finished(token, queue, scope=scope), ttl)
            if completed and settlement is Settlement.COMPLETE:
                outcomes.publish(execution.succeeded(store, claimed))
            return
        ending = self._ending(slot, settlement)
        ran = time.monotonic() - slot.attempt.claimed_ns / 1e9  # from its claim: the same clock
        settled = execution.settle_failure(
            store, self._claimed(store, slot), ending, duration=ran, elsewhere=True
        )
        outcomes.publish(settled)

    @staticmethod
    def _claimed(store: Store, slot: Slot) -> Claimed:
        """The attempt a dead child held, with its job's record as Redis holds it now."""
        assert slot.attempt is not None
        job_id = split_token(slot.attempt.token)
        return Claimed(slot.attempt.queue, job_id, slot.attempt.token, store.record(job_id))

    @staticmethod
    def _ending(slot: Slot, settlement: Settlement) -> Exception:
        """Why the attempt of a child that died running its job ended."""
        if settlement is Settlement.CANCEL:
            return JobCancelled(
                f"The job did not stop within {jobs_settings.CANCEL_GRACE:g} s of its cancel request "
                "and was killed."
            )
        if settlement is Settlement.TIMEOUT:
            return JobTimeout("The job ran past its timeout and was killed.")
        return WorkerLost(f"The work process running the job died (pid {slot.pid}).")

    def _kill(self, lane: Slot, event: Event) -> None:
        """Take ``event`` (a decision to kill) in ``lane`` and SIGKILL its process: every other lane of
        the process falls with it (``Event.FELL``). Its death settles the rest, lane by lane."""
        lane.on(event)
        process = self.slots.get(lane.pid)
        if process is not None:
            process.fell(lane)
        self._signal(lane.pid, signal.SIGKILL)

    def _lanes(self) -> list[Slot]:
        """Every lane of every work process (most processes have one: their own slot)."""
        return [lane for slot in self.slots.values() for lane in slot.every()]

    def _enforce(self, now: float) -> None:
        for lane in self._lanes():
            attempt = lane.attempt
            if (
                attempt is not None
                and lane.state in DEADLINED
                and now > attempt.deadline + jobs_settings.TIMEOUT_GRACE
            ):
                logger.error("Job %s overran its timeout; killing work process %d", attempt.token, lane.pid)
                self._kill(lane, Event.OVERRAN)
            self._enforce_cancel(lane, now)
        if self.stop_by is None or now < self.stop_by:
            return
        for slot in self.slots.values():
            if slot.state is State.HANDED_BACK:
                continue
            for lane in slot.every():
                if lane.can(Event.STOP):
                    lane.on(Event.STOP)
            self._signal(slot.pid, signal.SIGKILL)  # idle ones too: one stuck on Redis never exits

    def _enforce_cancel(self, slot: Slot, now: float) -> None:
        """Kill an attempt still running ``CANCEL_GRACE`` after its supervisor learned of its cancel
        request. One whose code returned is left to complete: the completion won the race; one whose
        code raised is left to settle its failure, which ends it cancelled."""
        if slot.state is State.CANCELLING and now > slot.since + jobs_settings.CANCEL_GRACE:
            logger.warning(
                "Job %s did not stop within %g s of its cancel request; killing work process %d",
                slot.token, jobs_settings.CANCEL_GRACE, slot.pid,
            )  # fmt: skip
            self._kill(slot, Event.GRACE_OVER)

    def _fence(self, gone: set[str], queues: Collection[str]) -> None:
        """Kill attempts whose lease was taken back (e.g. after a long Redis outage), so a job
        never runs twice at once; whoever took the lease runs or settles the job. ``gone``: what one
        heartbeat of the server of ``queues`` found.

        An attempt whose code ended is left alone: nothing is left to stop, and settling its end
        (which removes its lease) may wait on the database. A heartbeat may still find a lease gone
        that the work process removed itself, before the supervisor read what it reported. So a
        missing lease is only trusted when two heartbeats in a row (a third of a lease apart) find
        the same attempt still running without one.
        """
        for slot in self._lanes():
            if slot.queue not in queues:
                continue
            missing = slot.state in STOPPABLE and slot.token in gone
            if missing and slot.suspect == slot.token:
                logger.error(
                    "Lease of job %s was taken back; stopping its attempt in process %d", slot.token, slot.pid
                )
                self._kill(slot, Event.FENCE)
                metrics.fenced(slot.queue or "", "lease_gone")
            slot.suspect = slot.token if missing else None

    def _note_attempts(self, slots: Collection[Slot] | None = None) -> None:
        """Hand the attempts that started to the ledger, which settles their rows once they finish, and
        those whose code returned (or raised, once settled), whose rows it deletes at once (if dead-
        lettered). ``slots``: all of them by default."""
        slots = self._lanes() if slots is None else [lane for slot in slots for lane in slot.every()]
        started = [pair for slot in slots for pair in slot.started]
        returned = [pair for slot in slots for pair in slot.returned]
        raised = [pair for slot in slots for pair in slot.raised]
        if not (started or returned or raised):
            return
        for slot in slots:
            slot.started.clear()
            slot.returned.clear()
            slot.raised.clear()
        for shard in self.shards:
            shard.ledger.saw(pair for pair in started if pair[1] in shard.queues)
            ran = [pair for pair in returned if pair[1] in shard.queues]
            shard.ledger.ran(ran, [pair for pair in raised if pair[1] in shard.queues])

    def _settle_ran(self, now: float) -> None:
        """Delete the ledger rows of jobs whose code returned, or that are dead-lettered: the database
        alone, so Redis being down (a failover under way) holds nothing up."""
        if now < self._settle_ran_at:
            return
        failed = [guarded("Settling ledger rows", shard.ledger.settle_ran) for shard in self.shards]
        self._settle_ran_at = now + (SETTLE_RAN_RETRY if any(failed) else SETTLE_RAN_EVERY)

    def _note_cancels(self, requested: set[str]) -> None:
        """Start the grace of each running attempt a heartbeat found asked to stop; a lane's is asked
        on its board to stop its task at once (cancelled on the event loop, its neighbours untouched)."""
        for slot in self._lanes():
            if slot.state is State.RUNNING and slot.token in requested:
                slot.on(Event.CANCEL)
                board = self.boards.get(slot.pid)
                number = self._lane_number(slot)
                if number and board is not None and slot.attempt is not None:
                    board.ask_to_stop(number, slot.attempt.claimed_ns)
                logger.info(
                    "Job %s was asked to stop; its work process %d is killed in %g s unless it stops first",
                    slot.token, slot.pid, jobs_settings.CANCEL_GRACE,
                )  # fmt: skip

    def _lane_number(self, lane: Slot) -> int:
        """The number of ``lane`` in its process (0: the process's own slot)."""
        process = self.slots.get(lane.pid)
        found = [n for n, one in (process.lanes.items() if process else ()) if one is lane]
        return found[0] if found else 0

    def _report_kills(self) -> None:
        """Log and count the attempts the lease guard killed (before their slots are reaped)."""
        for killed in self.guard.killed():
            slot = self.slots.get(killed.pid)
            attempts = [lane.attempt for lane in slot.every()] if slot is not None else []
            known = next((a for a in attempts if a is not None and a.claimed_ns == killed.claimed_ns), None)
            logger.error(
                "No heartbeat of job %s reached Redis for %.1f s; killed its attempt in process %d "
                "before its lease could expire, so it never runs twice at once",
                known.token if known else "(claimed, not yet reported)",
                killed.silent_for,
                killed.pid,
            )
            metrics.fenced(known.queue if known else "", "deadline")

    # --- Redis bookkeeping -----------------------------------------------------------------------

    def _heartbeat(self, now: float) -> None:
        """Tell each server's heartbeat thread which leases to keep, fence what they found gone, and
        (every third of a lease) refresh RQ's worker records."""
        for shard in self.shards:
            shard.heartbeat.publish(
                (s.pid, s.attempt.token, s.attempt.claimed_ns)
                for s in self._lanes()
                if s.attempt is not None and s.attempt.queue in shard.queues
            )
            for gone in shard.heartbeat.gone():
                self._fence(gone, shard.queues)
            self._note_cancels(shard.heartbeat.cancels())
        if now < self._next_heartbeat:
            return
        lease = jobs_settings.LEASE_SECONDS
        self._next_heartbeat = now + lease / 3
        for shard in self.shards:
            if shard.reach.up():
                try:
                    self._register(shard, lease)
                except RedisError as exc:  # logged there; the records are refreshed once it answers
                    shard.reach.failed(exc)

    def _register(self, shard: Shard, lease: float) -> None:
        """Keep RQ's worker records on each server, with the queues served there, so ``rq info`` and
        django-rq list our work processes (a work process serving two servers is listed on both)."""
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        with shard.store.connection.pipeline(transaction=False) as pipe:
            for slot in self.slots.values():
                key = keys.worker_key(slot.name)
                held = [lane.token for lane in slot.every() if lane.token and lane.queue in shard.queues]
                job_id = split_token(held[0]) if held else ""
                pipe.hset(
                    key,
                    mapping={
                        "last_heartbeat": stamp,
                        "queues": ",".join(shard.queues),
                        "pid": slot.pid,
                        "hostname": self.hostname,
                        "state": "busy" if job_id else "idle",
                        "current_job": job_id,
                        RUNJOBS_MARK: 1,
                    },
                )
                pipe.hsetnx(key, "birth", stamp)
                pipe.expire(key, int(lease * 3))
                pipe.sadd(keys.WORKERS_SET, key)
                for queue in shard.queues:
                    pipe.sadd(keys.queue_workers_key(queue), key)
            pipe.execute()

    def _unregister(self, slot: Slot) -> None:
        key = keys.worker_key(slot.name)
        for shard in self.shards:
            if shard.reach.down:
                continue  # the hash expires by itself
            try:
                with shard.store.connection.pipeline(transaction=False) as pipe:
                    pipe.delete(key)
                    pipe.srem(keys.WORKERS_SET, key)
                    for queue in shard.queues:
                        pipe.srem(keys.queue_workers_key(queue), key)
                    pipe.execute()
            except RedisError:
                pass  # the hash expires by itself

    def _maintain(self) -> None:
        """Each server's maintenance pass, then the outcome counts, each to its queue's server. A server
        that does not answer is set aside (and probed), so it never holds up the others' duties."""
        for shard in self.shards:
            if shard.reach.up():
                try:
                    shard.maintenance.tick()
                except RedisError as exc:
                    shard.reach.failed(exc)
        stats.flush(self._stats_target)
        history.flush()

    def _stats_target(self, queue: str) -> Redis | None:
        """Where the outcome counts of ``queue`` go now: its server, unless that one is set aside."""
        shard = self.shard_of.get(queue, self.shards[0])
        return None if shard.reach.down else shard.store.connection

    # --- main loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        while self.slots or (self.respawn_at and not self.stopping):
            self._read(jobs_settings.MAINTENANCE_INTERVAL)
            self._note_attempts()
            self._report_kills()
            self._reap_children()
            self.guard.retain(self.slots.keys())  # forget the exited ones
            now = time.monotonic()
            self._settle_ran(now)
            if not self.stopping:
                self._respawn_due(now)
            self._enforce(now)
            self._heartbeat(now)
            if not self.stopping and now >= self._maintain_at:
                self._maintain_at = now + min(MAINTAIN_EVERY, jobs_settings.MAINTENANCE_INTERVAL)
                self._maintain()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        burst = f" until no job is due within {self.burst_wait:g} s" if self.burst else ""
        where = "; ".join(
            f"{', '.join(server.queues)} on Redis {redis_location(server.connection)}"
            for server in self.servers
        )
        # said before the spawn, so that it comes before the first job's outcome line
        logger.info(
            "runjobs (pid %d) serving %s with %d work process(es)%s",
            os.getpid(),
            where,
            self.concurrency,
            burst,
        )
        for _ in range(self.concurrency):
            self._spawn()
        # the leases of the first jobs are kept and fenced from the start, not from the end of the
        # first maintenance pass, which runs after the spawn so that a job enqueued now starts at once
        self.guard.start()
        for shard in self.shards:
            shard.heartbeat.start()
        try:
            self._maintain()
            self._loop()
            self._settle_ran_at = 0.0
            self._settle_ran(time.monotonic())  # what the last jobs' reports left, before going
        finally:
            for shard in self.shards:
                shard.heartbeat.stop(wait=False)  # a beat blocked on a frozen Redis holds no job
            self.guard.stop()
        if self.fatal:
            logger.error("runjobs stopping: %s", self.fatal)
            return 1
        return 0
