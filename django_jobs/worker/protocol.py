"""What a work process tells its supervisor over their pipe: one line per report, typed here.

Both sides use this module only: the work process writes ``encode(message)`` (or the constant bytes
of a mark), the supervisor feeds what it reads to a ``Reader``. A report is sent per job phase on the
hot path, so the wire stays what it always was: one letter, or ``S`` and four fields, per line.
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


class Started(NamedTuple):
    """The process started running an attempt: hard-kill it past ``deadline`` (``time.monotonic()``);
    ``claimed_ns`` is when its claim was sent, the lease guard's key for the attempt."""

    token: str
    queue: str
    deadline: float
    claimed_ns: int


Message = Started | Mark


class Malformed(ValueError):
    """A line no report reads as; its message is one line, quoting the line's start."""


#: Each mark's full line, so a plain job's reports cost the work process one write and no encoding.
WIRE = {mark: bytes(mark) + b"\n" for mark in Mark}
_MARKS: dict[bytes, Mark] = {bytes(mark): mark for mark in Mark}
_new = tuple.__new__


def encode(message: Message) -> bytes:
    """The line ``message`` is sent as, newline included."""
    if isinstance(message, Started):
        return encode_started(*message)
    return WIRE[message]


def encode_started(token: str, queue: str, deadline: float, claimed_ns: int) -> bytes:
    """``encode(Started(...))`` without building the tuple: the work process sends one per job."""
    return f"S {token} {queue} {deadline:.3f} {claimed_ns}\n".encode()


def decode(line: bytes) -> Message:
    """The report one line (without its newline) carries; ``Malformed`` if it carries none."""
    return _MARKS.get(line) or _started(line)


def _started(line: bytes) -> Started:
    try:
        kind, token, queue, deadline, claimed_ns = line.decode().split(" ")
        if kind != "S":
            raise ValueError
        # tuple.__new__: what Started(...) does, without its Python-level __new__ (one per job)
        return _new(Started, (token, queue, float(deadline), int(claimed_ns)))
    except ValueError:  # a wrong field count, a bad number, bytes that are not UTF-8
        raise Malformed(f"unreadable report {line[:80]!r}") from None


class Reader:
    """Turns the bytes read from one pipe into reports; a partial line waits for the rest."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[Message | Malformed]:
        """The reports in ``data`` (after what was left over), in order; a bad line is a ``Malformed``
        in its place, never raised, so one garbled report costs only itself."""
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        found: list[Message | Malformed] = []
        for line in lines:
            message: Message | Malformed | None = _MARKS.get(line)  # most reports: no call
            if message is None:
                try:
                    message = _started(line)
                except Malformed as bad:
                    message = bad
            found.append(message)
        if len(self.buffer) > MAX_LINE:
            found.append(Malformed(f"report line longer than {MAX_LINE} bytes dropped"))
            self.buffer = b""
        return found
