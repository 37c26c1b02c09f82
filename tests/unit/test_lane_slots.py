"""The supervisor's view of a work process with lanes: each lane's attempt is a slot of its own,
moved by the same transition table; a kill decided for one lane fells the others, whose running jobs
go back to their queue (their attempt given back), while what their code got done still counts."""

from __future__ import annotations

import pytest

from django_jobs.worker.guard import ClaimBoard
from django_jobs.worker.protocol import (
    Laned,
    Malformed,
    Mark,
    Reader,
    Started,
    decode,
    encode,
    encode_started,
)
from django_jobs.worker.slot import TRANSITIONS, Event, Settlement, Slot, State

START = Started("job-1:n0", "default", 1234.5, 987654321)
LANE = Started("job-2:n1", "default", 99.0, 123)


def test_lane_zero_keeps_the_bare_wire_and_other_lanes_are_tagged():
    assert encode(START) == encode_started(*START) == b"S job-1:n0 default 1234.500 987654321\n"
    assert encode(Laned(3, LANE)) == encode_started(*LANE, lane=3) == b"3:S job-2:n1 default 99.000 123\n"
    assert encode(Laned(12, Mark.RETURNED)) == b"12:R\n"
    assert decode(b"12:R") == Laned(12, Mark.RETURNED)
    assert decode(b"3:S job-2:n1 default 99.000 123") == Laned(3, LANE)


@pytest.mark.parametrize("line", [b"0:R", b"3:", b"3:Q", b"3:4:R", b"3R", b"x:R", b"-1:R"])
def test_a_garbled_lane_report_is_malformed(line):
    (found,) = Reader().feed(line + b"\n")
    assert isinstance(found, Malformed)


def test_each_lane_is_a_slot_of_its_own():
    process = Slot(7, -1, "host.7")
    process.feed(encode(START) + encode(Laned(2, LANE)))
    lane = process.lanes[2]
    assert (process.state, lane.state) == (State.RUNNING, State.RUNNING)
    assert (process.token, lane.token) == (START.token, LANE.token)
    assert lane.started == [("job-2", "default")] and process.started == [("job-1", "default")]
    process.feed(
        encode(Laned(2, Mark.RETURNED)) + encode(Laned(2, Mark.COMPLETING)) + encode(Laned(2, Mark.DONE))
    )
    assert lane.state is State.IDLE and lane.attempt is None and lane.returned == [("job-2", "default")]
    assert process.state is State.RUNNING  # lane 0 untouched
    assert process.every() == [process, lane] and process.lane(2) is lane and process.lane(0) is process


def three_lanes() -> tuple[Slot, Slot, Slot]:
    process = Slot(7, -1, "host.7")
    process.feed(encode(START) + encode(Laned(1, LANE)) + encode(Laned(2, LANE._replace(token="job-3:n2"))))
    return process, process.lanes[1], process.lanes[2]


def test_a_kill_for_one_lane_fells_the_others_and_hands_their_jobs_back():
    process, cause, other = three_lanes()
    cause.on(Event.OVERRAN)
    process.fell(cause)
    assert cause.settlement is Settlement.TIMEOUT
    assert (process.state, other.state) == (State.FELLED, State.FELLED)
    assert process.settlement is other.settlement is Settlement.HAND_BACK


@pytest.mark.parametrize(
    ("before", "after", "settlement"),
    [
        ((), State.FELLED, Settlement.HAND_BACK),
        ((Event.CANCEL,), State.FELLED, Settlement.HAND_BACK),  # its release ends it cancelled
        ((Event.RAISED,), State.FELLED, Settlement.HAND_BACK),
        ((Event.RETURNED,), State.KILLED_RETURNED, Settlement.COMPLETE),  # its code returned: a success
        ((Event.RETURNED, Event.COMPLETING), State.KILLED_COMPLETING, Settlement.COMPLETION),
        ((Event.DONE,), State.KILLED, Settlement.NOTHING),
    ],
)
def test_what_a_felled_lane_leaves_to_settle_follows_from_its_state(before, after, settlement):
    process, cause, other = three_lanes()
    for event in before:
        assert other.on(event)
    cause.on(Event.FENCE)
    process.fell(cause)
    assert (other.state, other.settlement) == (after, settlement)


def test_a_return_read_after_the_fall_still_counts_as_a_success():
    process, cause, other = three_lanes()
    assert cause.on(Event.CANCEL) and cause.on(Event.GRACE_OVER)
    process.fell(cause)
    other.feed(encode(Mark.RETURNED))  # written before the kill, read after it
    assert other.state is State.KILLED_RETURNED and other.settlement is Settlement.COMPLETE


def test_felled_is_reachable_only_through_a_fall_and_can_exit():
    sources = {state for state, moves in TRANSITIONS.items() if moves.get(Event.FELL) is State.FELLED}
    assert sources == {State.RUNNING, State.CANCELLING, State.RAISED}
    assert TRANSITIONS[State.FELLED][Event.EXIT] is State.EXITED
    assert Event.FELL not in TRANSITIONS[State.TIMED_OUT]  # the lane that caused the kill keeps its cause


def test_the_claim_board_has_a_row_and_a_cancel_word_per_lane():
    board = ClaimBoard(3)
    board.post(11)
    board.post(22, 2)
    assert [board.read(lane) for lane in range(3)] == [11, 0, 22]
    board.ask_to_stop(2, 22)
    assert [board.stop_asked(lane) for lane in range(3)] == [0, 0, 22]
    board.close()
