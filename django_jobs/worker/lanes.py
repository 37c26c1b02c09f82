"""Lanes: ``async def`` jobs side by side in one work process, up to ``JOBS["ASYNC_JOBS"]`` at once.

An ``async def`` job waiting on I/O would otherwise hold a whole work process. With lanes, the main
thread keeps claiming: a sync job it runs itself, as always (its soft timeout is SIGALRM, which only
the main thread gets); an ``async def`` one it hands to a free lane, and it claims nothing while
every lane is busy. A lane is a thread that runs the attempt through the production path
(``execution.run``: settling, outcomes, history, metrics unchanged) and completes a success itself,
one round trip of its own. The job's coroutine runs on the process's ONE event loop (a thread of
its own), under its own soft timeout (asyncio's cancellation, as ``invocation`` does everywhere).

Each lane reports over the pipe tagged with its number (``protocol.Laned``) and posts its claim on
its own row of the claim board, so the supervisor keeps, fences and times out each lane's lease on
its own. A cancel request is posted on the board too: the loop cancels that lane's task alone. What
no cancellation can stop (code blocking the loop) is the supervisor's hard kill, of the whole
process; every other lane's job then goes back to its queue, its attempt given back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core import execution, invocation, registry, tracing
from django_jobs.core.outcomes import AttemptEnded
from django_jobs.exceptions import JobCancelled, JobNotFound
from django_jobs.store import Claimed, Finished, Store
from django_jobs.worker.guard import ClaimBoard
from django_jobs.worker.protocol import Laned, Mark, encode, encode_started

logger = logging.getLogger("django_jobs.worker")

#: Seconds between two looks of the event loop at the board for its lanes' cancel requests.
CANCEL_POLL = 0.1
#: Seconds a lane waits before trying again a completion its Redis did not take.
COMPLETE_RETRY = 0.5


def is_async(claimed: Claimed) -> bool:
    """Whether the claimed job is an ``async def`` one (its name, looked up in the registry)."""
    try:
        return registry.get(claimed.record.name).is_async
    except JobNotFound:
        return False  # the main thread settles it as unregistered, as ever


@dataclass(eq=False)
class Lane:
    """One lane: what it runs (the attempt's claim time, 0: free), and its task on the loop."""

    number: int
    claimed_ns: int = 0
    task: asyncio.Task[Any] | None = None  # read and written on the loop's thread only
    cancelled: bool = False  # its task was cancelled for the job's cancel request
    inbox: queue.SimpleQueue[tuple[Store, Claimed, int]] = field(default_factory=queue.SimpleQueue)


class Loop:
    """The work process's one event loop, on its own thread; it also reads the lanes' cancel requests."""

    def __init__(self, board: ClaimBoard, lanes: list[Lane]) -> None:
        self.board, self.lanes = board, lanes
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="jobs-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._poll)
        self.loop.run_forever()

    def _poll(self) -> None:
        """Cancel the task of each lane whose running attempt its supervisor asked to stop."""
        for lane in self.lanes:
            asked = self.board.stop_asked(lane.number)
            if asked and asked == lane.claimed_ns and lane.task is not None and not lane.cancelled:
                lane.cancelled = True
                lane.task.cancel()
        self.loop.call_later(CANCEL_POLL, self._poll)

    def run(self, lane: Lane, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop as ``lane``'s task, in the calling thread's context (the
        attempt's ``current_job()``), and return what it returned; called from the lane's thread."""
        context = contextvars.copy_context()
        ended: concurrent.futures.Future[Any] = concurrent.futures.Future()
        escaped: list[BaseException] = []

        def start() -> None:
            task = self.loop.create_task(_cancellable(lane, coroutine, escaped), context=context)
            lane.task = task
            task.add_done_callback(functools.partial(_hand_over, lane, ended, escaped))

        self.loop.call_soon_threadsafe(start)
        return ended.result()


async def _cancellable(lane: Lane, coroutine: Coroutine[Any, Any, Any], escaped: list[BaseException]) -> Any:
    try:
        return await coroutine
    except asyncio.CancelledError:
        if lane.cancelled:  # the job's cancel request: the attempt ends cancelled, never retried
            raise JobCancelled("The job was cancelled while it ran: its task was cancelled.") from None
        raise
    except (SystemExit, KeyboardInterrupt) as exc:  # asyncio would stop the loop: the job's outcome
        escaped.append(exc)
        return None


def _hand_over(
    lane: Lane, ended: concurrent.futures.Future[Any], escaped: list[BaseException], task: asyncio.Task[Any]
) -> None:
    lane.task = None
    if escaped:
        ended.set_exception(escaped[0])
    elif task.cancelled():
        ended.set_exception(asyncio.CancelledError())
    elif task.exception() is not None:
        ended.set_exception(task.exception())
    else:
        ended.set_result(task.result())


class Lanes:
    """The lanes of one work process and their shared event loop."""

    def __init__(self, count: int, report_fd: int, board: ClaimBoard) -> None:
        self.report_fd, self.board = report_fd, board
        self.lanes = [Lane(number) for number in range(1, count + 1)]
        self.loop = Loop(board, self.lanes)
        self._changed = threading.Condition()

    def start(self) -> None:
        self.loop.start()
        for lane in self.lanes:
            name = f"jobs-lane-{lane.number}"
            threading.Thread(target=self._serve, args=(lane,), name=name, daemon=True).start()

    def free(self) -> Lane | None:
        """A lane that runs nothing, if any."""
        return next((lane for lane in self.lanes if not lane.claimed_ns), None)

    def busy(self) -> bool:
        """Whether any lane holds an attempt."""
        return any(lane.claimed_ns for lane in self.lanes)

    def wait_free(self, timeout: float) -> None:
        """Block until a lane is free, or ``timeout`` seconds passed."""
        with self._changed:
            self._changed.wait_for(lambda: self.free() is not None, timeout)

    def hand(self, store: Store, claimed: Claimed, sent: int) -> None:
        """Give the claimed attempt to a free lane (the caller made sure there is one)."""
        lane = self.free()
        assert lane is not None
        self.board.post(sent, lane.number)  # at once: the lease guard watches it from its claim on
        lane.claimed_ns, lane.cancelled = sent, False
        lane.inbox.put((store, claimed, sent))

    def _serve(self, lane: Lane) -> None:
        while True:
            store, claimed, sent = lane.inbox.get()
            try:
                self._attempt(lane, store, claimed, sent)
            except BaseException:  # never lose the lane: its attempt's lease expires and is reaped
                logger.exception("Lane %d failed with job %s", lane.number, claimed.id)
            finally:
                self.board.post(0, lane.number)
                with self._changed:
                    lane.claimed_ns = 0
                    self._changed.notify_all()

    def _report(self, lane: Lane, mark: Mark) -> None:
        os.write(self.report_fd, encode(Laned(lane.number, mark)))

    def _attempt(self, lane: Lane, store: Store, claimed: Claimed, sent: int) -> None:
        """One attempt in ``lane``, reported as the main thread reports its own; then its completion."""

        def arm(timeout: float) -> None:
            deadline = time.monotonic() + timeout
            os.write(
                self.report_fd, encode_started(claimed.token, claimed.queue, deadline, sent, lane.number)
            )

        def end(returned: bool) -> None:
            self.board.post(0, lane.number)  # the code is done: nothing left for the lease guard to kill
            self._report(lane, Mark.RETURNED if returned else Mark.RAISED)

        with invocation.coroutines_run_by(functools.partial(self.loop.run, lane)):
            ended = _run(store, claimed, arm, end)
        self.board.post(0, lane.number)
        finished = execution.completion(ended) if ended is not None else None
        if finished is not None:
            self._report(lane, Mark.COMPLETING)  # the supervisor keeps the lease until it lands
            _complete(store, finished)
        self._report(lane, Mark.DONE)
        if tracing.active():
            tracing.flush(tracing.FLUSH_MILLIS)


def _run(store: Store, claimed: Claimed, arm: Any, end: Any) -> AttemptEnded | None:
    """``execution.run``; whatever escapes costs this attempt, not the lane (as in the main thread)."""
    try:
        return execution.run(store, claimed, on_start=arm, on_end=end)
    except RedisError as exc:
        logger.warning("Redis unavailable while settling job %s (%s)", claimed.id, exc)
    except BaseException:
        logger.exception("Could not settle job %s; it will be retried once its lease expires", claimed.id)
    return None


def _complete(store: Store, finished: Finished) -> None:
    """Complete a success, trying again while its Redis does not answer (its lease is kept meanwhile;
    if the process is stopped first, its supervisor completes the job)."""
    while True:
        try:
            store.complete(finished, jobs_settings.FINISHED_TTL)
            return
        except RedisError as exc:
            logger.warning("Could not complete job %s yet (%s); trying again.", finished.token, exc)
            time.sleep(COMPLETE_RETRY)
