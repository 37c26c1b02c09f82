"""What a work process tells its supervisor over their pipe: one line per report, typed here.

Both sides use this module only: the work process writes ``encode(message)`` (or the constant bytes
of a mark), the supervisor feeds what it reads to a ``Reader``. A report is sent per job phase on the
hot path, so the wire stays what it always was: one letter, or ``S`` and four fields, per line (and
per job of a batch that waits its turn, ``H`` and three).

A work process with lanes (``worker.lanes``: ``async def`` jobs run side by side) reports each lane's
attempts too: a lane's line is its number and a colon before the same report (``2:S ...``, ``2:R``),
read as a :class:`Laned`. The main thread is lane 0 and keeps the bare line, so it pays nothing.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

#: A line longer than this without its newline is garbage: it is dropped rather than kept growing.
MAX_LINE = 4096


class Mark(bytes, Enum):
    """A report that carries nothing but its kind (its value is its wire form, without the newline)."""

    RETURNED = b"R"  #: the job's code returned: the job succeeded, whatever happens to the process
    RAISED = b"E"  #: the job's code raised: the process settles the failure itself
    COMPLETING = b"C"  #: the success is completed by the next claim: keep the lease, no deadline
    DONE = b"D"  #: the process holds no attempt (idle, or its completion landed)
    LANDED = b"L"  #: a batch is over: its completions landed, and it holds none of its jobs but this one


class Held(NamedTuple):
    """The process leased this job in a batch and starts it after the jobs before it: keep its lease,
    and give it back to its queue (its attempt unspent) if the process dies first."""

    token: str
    queue: str
    claimed_ns: int


class Started(NamedTuple):
    """The process started running an attempt: hard-kill it past ``deadline`` (``time.monotonic()``);
    ``claimed_ns`` is when its claim was sent, the lease guard's key for the attempt."""

    token: str
    queue: str
    deadline: float
    claimed_ns: int


Message = Started | Mark | Held


class Laned(NamedTuple):
    """A report about the attempt of lane ``lane`` (at least 1) of a work process."""

    lane: int
    message: Message


class Malformed(ValueError):
    """A line no report reads as; its message is one line, quoting the line's start."""


#: Each mark's full line, so a plain job's reports cost the work process one write and no encoding.
WIRE = {mark: bytes(mark) + b"\n" for mark in Mark}
_MARKS: dict[bytes, Mark] = {bytes(mark): mark for mark in Mark}
_new = tuple.__new__


def encode(message: Message | Laned) -> bytes:
    """The line ``message`` is sent as, newline included."""
    if isinstance(message, Laned):
        return _prefix(message.lane) + encode(message.message)
    if isinstance(message, Started):
        return encode_started(*message)
    if isinstance(message, Held):
        return f"H {message.token} {message.queue} {message.claimed_ns}\n".encode()
    return WIRE[message]


def encode_started(token: str, queue: str, deadline: float, claimed_ns: int, lane: int = 0) -> bytes:
    """``encode(Started(...))`` without building the tuple: the work process sends one per job."""
    line = f"S {token} {queue} {deadline:.3f} {claimed_ns}\n".encode()
    return _prefix(lane) + line if lane else line


def _prefix(lane: int) -> bytes:
    if not isinstance(lane, int) or lane < 1:
        raise ValueError(f"a lane's number is at least 1, got {lane!r}")
    return b"%d:" % lane


def decode(line: bytes) -> Message | Laned:
    """The report one line (without its newline) carries; ``Malformed`` if it carries none."""
    return _MARKS.get(line) or _other(line)


def _other(line: bytes) -> Message | Laned:
    """A start report, or a lane's report (its number, a colon, then the report)."""
    if line[:1].isdigit():
        number, colon, rest = line.partition(b":")
        if not colon or not number.isdigit() or int(number) < 1 or rest[:1].isdigit():
            raise Malformed(f"unreadable report {line[:80]!r}")
        return Laned(int(number), _MARKS.get(rest) or _started(rest))
    return _started(line)


def _started(line: bytes) -> Started | Held:
    try:
        kind, token, queue, *rest = line.decode().split(" ")
        if kind == "S":
            deadline, claimed_ns = rest
            # tuple.__new__: what Started(...) does, without its Python-level __new__ (one per job)
            return _new(Started, (token, queue, float(deadline), int(claimed_ns)))
        if kind == "H":
            (held_ns,) = rest
            return Held(token, queue, int(held_ns))
        raise ValueError
    except ValueError:  # a wrong field count, a bad number, bytes that are not UTF-8
        raise Malformed(f"unreadable report {line[:80]!r}") from None


class Reader:
    """Turns the bytes read from one pipe into reports; a partial line waits for the rest."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[Message | Laned | Malformed]:
        """The reports in ``data`` (after what was left over), in order; a bad line is a ``Malformed``
        in its place, never raised, so one garbled report costs only itself."""
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        found: list[Message | Laned | Malformed] = []
        for line in lines:
            message: Message | Laned | Malformed | None = _MARKS.get(line)  # most reports: no call
            if message is None:
                try:
                    message = _other(line)
                except Malformed as bad:
                    message = bad
            found.append(message)
        if len(self.buffer) > MAX_LINE:
            found.append(Malformed(f"report line longer than {MAX_LINE} bytes dropped"))
            self.buffer = b""
        return found
