"""The pipe between a work process and its supervisor: every report round-trips, and whatever else
a child writes costs one log line and nothing more."""

from __future__ import annotations

import logging
import os

import pytest

from django_jobs.worker.protocol import MAX_LINE, Malformed, Mark, Reader, Started, decode, encode
from django_jobs.worker.slot import Slot, State
from django_jobs.worker.supervisor import Supervisor

START = Started("job-1:n0", "default", 1234.5, 987654321)
MESSAGES = [START, *Mark]


@pytest.mark.parametrize("message", MESSAGES, ids=str)
def test_every_report_round_trips(message):
    wire = encode(message)
    assert wire.endswith(b"\n") and wire.count(b"\n") == 1
    assert decode(wire[:-1]) == message
    assert Reader().feed(wire) == [message]


def test_a_start_report_keeps_its_fields_and_types():
    (back,) = Reader().feed(encode(START))
    assert isinstance(back, Started)
    assert (back.token, back.queue, back.deadline, back.claimed_ns) == START
    assert type(back.deadline) is float and type(back.claimed_ns) is int


def test_a_report_split_across_reads_waits_for_its_end():
    reader = Reader()
    wire = encode(START) + encode(Mark.RETURNED)
    assert reader.feed(wire[:7]) == []
    assert reader.feed(wire[7:-1]) == [START]
    assert reader.feed(wire[-1:]) == [Mark.RETURNED]


GARBAGE = [b"X", b"", b"RR", b"S job-1:n0 default", b"S a b notanumber 1", b"S a b 1.0 1.5",
           b"S \xff\xfe default 1.0 1", b"T a b 1.0 1", b"S a b 1.0 1 extra"]  # fmt: skip


@pytest.mark.parametrize("line", GARBAGE, ids=repr)
def test_a_garbled_line_is_one_malformed_and_the_next_report_is_read(line):
    found = Reader().feed(line + b"\n" + encode(Mark.DONE))
    assert len(found) == 2 and isinstance(found[0], Malformed)
    assert "\n" not in str(found[0])
    assert found[1] is Mark.DONE


def test_a_line_that_never_ends_is_dropped_not_kept_growing():
    reader = Reader()
    found = reader.feed(b"x" * (MAX_LINE + 1))
    assert len(found) == 1 and isinstance(found[0], Malformed)
    assert reader.buffer == b""
    assert reader.feed(encode(Mark.DONE)) == [Mark.DONE]


def test_the_supervisor_reads_garbage_from_a_child_as_one_line_and_goes_on(caplog):
    """Through a real pipe, as the supervisor drains it: the garbled report is logged once, the
    reports around it still move the slot."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    slot = Slot(4242, read_fd, "host.4242")
    try:
        os.write(write_fd, encode(START) + b"\xff garbage \x00\n" + encode(Mark.RETURNED))
        with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
            Supervisor._drain(slot)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert slot.state is State.RETURNED and slot.attempt == START
    (record,) = caplog.records
    assert "4242" in record.getMessage() and "\n" not in record.getMessage()
