"""Claims in batches: when a queue has a backlog of short jobs, one claim leases several of them for
one work process, and the claim after them completes them all, so Redis and the client pay one round
trip (and one script call) per batch, not per job.

A batch is only as big as the jobs are short: at most ``JOBS["CLAIM_BATCH"]`` jobs, and only as many
as this process's recent jobs (a moving average) run in ``BATCH_WINDOW``. So a job that takes 20 ms
or more is claimed alone, as ever, and a job never waits behind its batch for longer than about that
window: a job of higher priority, a pause or a cancel request arriving meanwhile acts that much later
than with single claims, the order a claim leases in is the same. An idle queue hands out its one job
at once. The supervisor knows every job of a batch (``protocol.Held``): it keeps their leases and,
if the process dies, gives the jobs that had not started back to their queues, their attempt
unspent, and completes those that succeeded.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_jobs.store import Finished

#: Seconds of work a batch may hold: the jobs it leases at once run in about this long.
BATCH_WINDOW = 0.02
#: The weight of the latest job in the moving average of this process's job times.
_WEIGHT = 0.2


class Pace:
    """How many jobs this process's next claim asks for, from how long its recent jobs took."""

    __slots__ = ("most", "seconds")

    def __init__(self, most: int) -> None:
        self.most = most  # JOBS["CLAIM_BATCH"]; 1: no batches
        self.seconds: float | None = None  # the moving average of its job times, once one ran

    def ran(self, seconds: float) -> None:
        """One job took ``seconds`` (its attempt, settling included)."""
        average = self.seconds
        self.seconds = seconds if average is None else average + _WEIGHT * (seconds - average)

    def want(self, left: int = 0) -> int:
        """The size of the next claim; ``left``: at most this many (0: no bound)."""
        if self.most <= 1 or self.seconds is None:
            return 1
        fits = int(BATCH_WINDOW / self.seconds) if self.seconds > 0 else self.most
        return max(1, min(fits, self.most, left or self.most))


def split(finished: Sequence[Finished]) -> tuple[Finished | None, list[Finished], list[Finished]]:
    """A claim's completions: the one it completes first (one of a key's scope, if any: a claim
    carries one scope), the plain others, and any further ones of a scope, to complete one by one."""
    scoped = [one for one in finished if one.scope is not None]
    first = scoped[0] if scoped else (finished[0] if finished else None)
    return first, [one for one in finished if one.scope is None and one is not first], scoped[1:]
