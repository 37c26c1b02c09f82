"""What the supervisor knows about one work process: one explicit state, changed only through the
transition table below.

A state says what the process is doing and so what its death means (``Slot.settlement``): nothing,
a success to complete (and to publish, unless the process reported "completing" after publishing
it), a failure to settle (and why), or a job to hand back. Events come from the process's reports
(``protocol``) and from the supervisor's own decisions (a cancel request seen, a kill). Reports read
after a kill were written before it: the killed states take them in too, so a job whose code
returned before the kill is still completed.

A work process with lanes (``async def`` jobs side by side, ``JOBS["ASYNC_JOBS"]``) has one slot per
lane: the process's own slot is lane 0 (its main thread) and holds the others in ``lanes``, each
with its own state, attempt, deadline and lease, moved by the same table. A kill decided for one
lane's attempt (its timeout, its cancel grace, its fence) takes the whole process down: every other
lane is ``FELLED``, and a job whose code was still running there goes back to its queue with its
attempt given back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from time import monotonic as _monotonic

from django_jobs.store import split_token
from django_jobs.worker.protocol import Held, Laned, Mark, Reader, Started

logger = logging.getLogger("django_jobs.worker")


class State(StrEnum):
    STARTING = "starting"  #: forked, nothing reported yet
    IDLE = "idle"  #: holds no attempt
    RUNNING = "running"  #: the job's code runs under its deadline
    CANCELLING = "cancelling"  #: running, asked to stop: killed once the cancel grace is over
    RETURNED = "returned"  #: the code returned: a success, whatever happens next
    RAISED = "raised"  #: the code raised: the process settles the failure
    COMPLETING = "completing"  #: the success rides on the next claim: lease kept, no deadline
    TIMED_OUT = "timed out"  #: killed for overrunning its timeout
    CANCEL_KILLED = "cancel killed"  #: killed for outliving its cancel request's grace
    KILLED_RETURNED = "killed after returning"  #: killed after its code returned: still a success
    KILLED_COMPLETING = "killed completing"  #: killed once its success was published: still a success
    FENCED = "fenced"  #: killed because its lease was taken back: whoever took it settles the job
    HANDED_BACK = "handed back"  #: killed at the end of the shutdown grace: its job goes back
    FELLED = "felled"  #: killed for another lane's attempt of its process: its job goes back
    LEASED = "leased"  #: claimed in a batch, waiting its turn in the process: its job goes back
    KILLED = "killed"  #: killed holding nothing to settle
    EXITED = "exited"  #: reaped


class Event(StrEnum):
    STARTED = "start"  # the reports, see protocol
    RETURNED = "returned"
    RAISED = "raised"
    COMPLETING = "completing"
    DONE = "done"
    CANCEL = "cancel requested"  # the supervisor's findings and decisions
    OVERRAN = "overran its timeout"
    GRACE_OVER = "outlived its cancel grace"
    FENCE = "lease taken back"
    STOP = "shutdown grace over"
    FELL = "process killed for another lane"
    EXIT = "exited"


class Settlement(Enum):
    """What the death of a work process in a given state leaves to do."""

    NOTHING = "nothing"
    COMPLETE = "complete"  # the job succeeded; neither its completion nor its end's publishing is done
    COMPLETION = "completion"  # the job succeeded and its end was published; only its completion is missing
    LOST = "lost"  # failed: the process died under it
    TIMEOUT = "timeout"  # failed: killed past its timeout
    CANCEL = "cancel"  # failed: killed past its cancel grace
    HAND_BACK = "hand back"  # released to its queue, its attempt given back


S, E = State, Event
_RUNNING = {E.RETURNED: S.RETURNED, E.RAISED: S.RAISED, E.DONE: S.IDLE, E.OVERRAN: S.TIMED_OUT}
_RUNNING |= {E.FENCE: S.FENCED, E.STOP: S.HANDED_BACK, E.FELL: S.FELLED}
# Late reports to a killed process: what its code got done before the kill still counts.
_KILLED = {E.RETURNED: S.KILLED_RETURNED, E.COMPLETING: S.KILLED_COMPLETING, E.DONE: S.KILLED}
_KILLED |= {E.STARTED: S.RUNNING, E.STOP: S.HANDED_BACK}
_ABSORBED = (E.STARTED, E.RETURNED, E.RAISED, E.COMPLETING)
_MOVES: dict[State, dict[Event, State]] = {
    S.STARTING: {E.STARTED: S.RUNNING, E.DONE: S.IDLE},
    S.IDLE: {E.STARTED: S.RUNNING, E.DONE: S.IDLE},
    S.RUNNING: {**_RUNNING, E.CANCEL: S.CANCELLING},
    S.CANCELLING: {**_RUNNING, E.GRACE_OVER: S.CANCEL_KILLED},
    S.RETURNED: {E.COMPLETING: S.COMPLETING, E.DONE: S.IDLE, E.OVERRAN: S.KILLED_RETURNED},
    S.RAISED: {E.DONE: S.IDLE, E.OVERRAN: S.TIMED_OUT},
    S.COMPLETING: {E.STARTED: S.RUNNING, E.DONE: S.IDLE},
    S.TIMED_OUT: {**_KILLED, E.RAISED: S.TIMED_OUT},
    S.CANCEL_KILLED: {**_KILLED, E.RAISED: S.CANCEL_KILLED},
    S.KILLED_RETURNED: {E.COMPLETING: S.KILLED_COMPLETING, E.DONE: S.KILLED, E.STARTED: S.RUNNING},
    S.KILLED_COMPLETING: {E.COMPLETING: S.KILLED_COMPLETING, E.DONE: S.KILLED, E.STARTED: S.RUNNING},
    S.FENCED: {**dict.fromkeys(_ABSORBED, S.FENCED), E.DONE: S.KILLED},
    S.HANDED_BACK: {**dict.fromkeys(_ABSORBED, S.HANDED_BACK), E.DONE: S.KILLED},
    # a neighbour's kill: what the code got done before it still counts; a failure being settled
    # when it fell is handed back (if it was settled, the hand-back is fenced off and changes nothing)
    S.FELLED: {**_KILLED, E.RAISED: S.FELLED, E.STOP: S.FELLED},
    S.KILLED: {E.STARTED: S.RUNNING, E.DONE: S.KILLED},
    S.LEASED: {E.FELL: S.LEASED, E.STOP: S.LEASED},  # started or let go: the slot is dropped instead
}
for _state in (S.RETURNED, S.RAISED, S.KILLED_RETURNED):
    _MOVES[_state][E.STOP] = S.HANDED_BACK
for _state, _fell in ((S.STARTING, S.KILLED), (S.IDLE, S.KILLED), (S.RAISED, S.FELLED)):
    _MOVES[_state][E.FELL] = _fell
_MOVES[S.RETURNED][E.FELL] = S.KILLED_RETURNED
_MOVES[S.COMPLETING][E.FELL] = S.KILLED_COMPLETING

#: Every transition a slot may take: state -> event -> next state. Any other is refused. Every
#: state but the last may exit.
TRANSITIONS: Mapping[State, Mapping[Event, State]] = {
    **{state: {**moves, E.EXIT: S.EXITED} for state, moves in _MOVES.items()},
    S.EXITED: {},
}

#: Where a slot starts: a work process's own (and a lane's, made IDLE on its first report) forked;
#: a batch's waiting job's, made by the report that the process holds it (``protocol.Held``).
INITIAL = (S.STARTING, S.LEASED)

#: The states whose deadline the supervisor enforces: the code runs, or its end is being settled.
DEADLINED = frozenset({S.RUNNING, S.CANCELLING, S.RETURNED, S.RAISED})
#: The states whose attempt a lease guard kill or a fence may stop: the job's code is running.
STOPPABLE = frozenset({S.RUNNING, S.CANCELLING})

SETTLEMENTS: Mapping[State, Settlement] = {
    S.RETURNED: Settlement.COMPLETE,
    S.COMPLETING: Settlement.COMPLETION,
    S.KILLED_RETURNED: Settlement.COMPLETE,
    S.KILLED_COMPLETING: Settlement.COMPLETION,
    S.RUNNING: Settlement.LOST,
    S.CANCELLING: Settlement.LOST,
    S.RAISED: Settlement.LOST,
    S.TIMED_OUT: Settlement.TIMEOUT,
    S.CANCEL_KILLED: Settlement.CANCEL,
    S.HANDED_BACK: Settlement.HAND_BACK,
    S.FELLED: Settlement.HAND_BACK,
    S.LEASED: Settlement.HAND_BACK,
}

# Module names for what each report costs: an enum's attribute is a slower lookup.
_STARTED, _DONE, _RETURNED, _CANCELLING, _RAISED = E.STARTED, E.DONE, E.RETURNED, S.CANCELLING, S.RAISED
_EVENT_OF: Mapping[Mark, Event] = {
    Mark.RETURNED: E.RETURNED,
    Mark.RAISED: E.RAISED,
    Mark.COMPLETING: E.COMPLETING,
    Mark.DONE: E.DONE,
}
_LANDED = Mark.LANDED
#: A success whose completion is still to land: the states a batch's finished job is kept in.
_COMPLETED = frozenset({S.COMPLETING, S.KILLED_COMPLETING})


def _held(held: Held) -> Started:
    """A batch's waiting job as an attempt: no deadline until it starts."""
    return Started(held.token, held.queue, float("inf"), held.claimed_ns)


@dataclass(slots=True)
class Slot:
    """One work process: its state, since when (``time.monotonic()``), and the attempt it holds."""

    pid: int
    fd: int
    name: str
    state: State = State.STARTING
    since: float = field(default_factory=_monotonic)
    attempt: Started | None = None  # set by a start report, cleared by a "done" one
    suspect: str | None = None  # the running attempt's token, if the last heartbeat found no lease
    started: list[tuple[str, str]] = field(default_factory=list)  # (job id, queue) since the last look
    returned: list[tuple[str, str]] = field(default_factory=list)  # the same, of attempts whose code returned
    raised: list[tuple[str, str]] = field(default_factory=list)  # ... whose code raised, once they ended
    reader: Reader = field(default_factory=Reader)
    lanes: dict[int, Slot] = field(default_factory=dict)  # lane number (1..) -> its slot, once it reported
    # a batch's jobs: those waiting their turn (LEASED), and those done whose success the next claim
    # completes (COMPLETING), until the process reports the batch over (Mark.LANDED); by token
    batch: dict[str, Slot] = field(default_factory=dict)

    @property
    def token(self) -> str | None:
        return self.attempt.token if self.attempt is not None else None

    @property
    def queue(self) -> str | None:
        return self.attempt.queue if self.attempt is not None else None

    def can(self, event: Event) -> bool:
        """Whether the table allows ``event`` in the current state."""
        return event in TRANSITIONS[self.state]

    def on(self, event: Event) -> bool:
        """Take the transition ``event`` triggers and return True; a transition the table lacks is
        refused: logged in one line, the state kept, False returned. Never raises: a work process's
        odd report must not stop its supervisor."""
        target = TRANSITIONS[self.state].get(event)
        if target is None:
            logger.warning("Work process %d: %s refused while %s; ignored.", self.pid, event, self.state)
            return False
        if target is not self.state:
            self.state = target
            if target is _CANCELLING:  # the only state whose age matters: the cancel grace
                self.since = _monotonic()
        return True

    def feed(self, data: bytes) -> None:
        """Take in what the process reported; a garbled report is logged in one line and skipped."""
        for message in self.reader.feed(data):
            kind = type(message)
            if kind is Mark or kind is Started or kind is Held:
                self._take(message)  # type: ignore[arg-type]
            elif kind is Laned:
                self.lane(message.lane)._take(message.message)  # type: ignore[union-attr]
            else:
                logger.warning("Work process %d sent an %s; ignored.", self.pid, message)

    def _take(self, message: Mark | Started | Held) -> None:
        kind = type(message)
        if kind is Held:
            self.batch[message.token] = Slot(self.pid, -1, self.name, S.LEASED, attempt=_held(message))  # type: ignore[union-attr,arg-type]
            return
        if message is _LANDED:  # the batch is over: its completions landed, its other jobs started
            self.batch.clear()
            return
        if self.batch and kind is Started:
            self._turn(message)  # type: ignore[arg-type]
        if kind is Mark:
            event, before = _EVENT_OF[message], self.state  # type: ignore[index]
            if not self.on(event) or self.attempt is None:
                return
            if event is _RETURNED:  # the job ran: its ledger row can go
                self.returned.append((split_token(self.attempt.token), self.attempt.queue))
            elif event is _DONE:
                if before is _RAISED:  # its failure is settled: retried, or dead-lettered
                    self.raised.append((split_token(self.attempt.token), self.attempt.queue))
                self.attempt = None
        elif self.on(_STARTED):
            self.attempt = message  # type: ignore[assignment]
            self.started.append((split_token(message.token), message.queue))  # type: ignore[union-attr]

    def _turn(self, message: Started) -> None:
        """A job of the batch starts: it no longer waits, and the success before it (if any) waits
        for the next claim to complete it."""
        if self.batch.pop(message.token, None) is None:
            return
        if self.state in _COMPLETED and self.attempt is not None:
            self.batch[self.attempt.token] = Slot(self.pid, -1, self.name, self.state, attempt=self.attempt)

    def lane(self, number: int) -> Slot:
        """The slot of lane ``number`` of this process (0: its own), made idle on its first report."""
        if number == 0:
            return self
        found = self.lanes.get(number)
        if found is None:
            found = self.lanes[number] = Slot(self.pid, -1, f"{self.name}.{number}", State.IDLE)
        return found

    def every(self) -> list[Slot]:
        """This process's slot and those of its lanes, lane 0 first."""
        if not (self.lanes or self.batch):
            return [self]
        return [self, *self.lanes.values(), *self.batch.values()]

    def fell(self, cause: Slot) -> None:
        """The process is killed for ``cause``'s attempt: every other lane falls with it."""
        for other in self.every():
            if other is not cause and other.can(Event.FELL):
                other.on(Event.FELL)

    @property
    def settlement(self) -> Settlement:
        """What this process's death leaves to do, were it to die now."""
        if self.attempt is None:
            return Settlement.NOTHING
        return SETTLEMENTS.get(self.state, Settlement.NOTHING)
