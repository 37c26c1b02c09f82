"""A work process's batch, as its supervisor sees it: each job of the batch that waits its turn is a
slot of its own (``LEASED``: handed back, its attempt unspent, if the process dies), each success of
the batch waits for the claim after it (``COMPLETING``: completed if the process dies), until the
process reports the batch over; and how big a batch the process asks for."""

from __future__ import annotations

import pytest

from django_jobs.store import Finished
from django_jobs.store.model import Scope
from django_jobs.worker.batching import BATCH_WINDOW, Pace, split
from django_jobs.worker.protocol import Held, Malformed, Mark, Reader, Started, decode, encode
from django_jobs.worker.slot import Event, Settlement, Slot, State

CLAIMED = 987654321
FIRST, SECOND, THIRD = (Started(f"job-{n}:n0", "default", 100.0 + n, CLAIMED) for n in (1, 2, 3))


def held(start: Started) -> bytes:
    return encode(Held(start.token, start.queue, start.claimed_ns))


def batch_of_three() -> Slot:
    """A process that claimed three jobs at once and started the first."""
    process = Slot(7, -1, "host.7", State.IDLE)
    process.feed(held(SECOND) + held(THIRD) + encode(FIRST))
    return process


def settlements(process: Slot) -> dict[str | None, Settlement]:
    return {slot.token: slot.settlement for slot in process.every()}


def test_the_held_report_travels_as_one_line():
    wire = encode(Held("job-2:n0", "default", CLAIMED))
    assert wire == b"H job-2:n0 default 987654321\n"
    assert decode(wire[:-1]) == Held("job-2:n0", "default", CLAIMED)


@pytest.mark.parametrize("line", [b"H job-2:n0 default", b"H job-2:n0 default x", b"H a b 1 2"])
def test_a_garbled_held_report_is_malformed(line):
    (found,) = Reader().feed(line + b"\n")
    assert isinstance(found, Malformed)


def test_the_jobs_waiting_their_turn_go_back_if_the_process_dies():
    process = batch_of_three()
    assert process.state is State.RUNNING and process.token == FIRST.token
    assert settlements(process) == {
        FIRST.token: Settlement.LOST,
        SECOND.token: Settlement.HAND_BACK,
        THIRD.token: Settlement.HAND_BACK,
    }


def test_a_success_of_the_batch_is_completed_if_the_process_dies_before_the_next_claim():
    process = batch_of_three()
    process.feed(encode(Mark.RETURNED) + encode(Mark.COMPLETING) + encode(SECOND))
    assert process.token == SECOND.token and process.state is State.RUNNING
    assert settlements(process) == {
        SECOND.token: Settlement.LOST,
        THIRD.token: Settlement.HAND_BACK,
        FIRST.token: Settlement.COMPLETION,
    }
    process.feed(encode(Mark.RAISED) + encode(Mark.DONE) + encode(THIRD))  # its failure settled by it
    assert settlements(process) == {THIRD.token: Settlement.LOST, FIRST.token: Settlement.COMPLETION}


def test_the_batch_is_forgotten_once_the_process_reports_it_over():
    process = batch_of_three()
    for start in (SECOND, THIRD):
        process.feed(encode(Mark.RETURNED) + encode(Mark.COMPLETING) + encode(start))
    process.feed(encode(Mark.RETURNED) + encode(Mark.COMPLETING))
    assert {slot.state for slot in process.batch.values()} == {State.COMPLETING}
    process.feed(encode(Mark.LANDED) + encode(Mark.DONE))
    assert process.batch == {} and process.every() == [process] and process.state is State.IDLE


def test_a_kill_leaves_the_waiting_jobs_to_hand_back_and_the_successes_to_complete():
    process = batch_of_three()
    process.feed(encode(Mark.RETURNED) + encode(Mark.COMPLETING) + encode(SECOND))
    assert process.on(Event.OVERRAN)
    process.fell(process)
    assert settlements(process) == {
        SECOND.token: Settlement.TIMEOUT,
        THIRD.token: Settlement.HAND_BACK,
        FIRST.token: Settlement.COMPLETION,
    }


def test_a_landed_report_without_a_batch_changes_nothing():
    process = Slot(7, -1, "host.7", State.IDLE)
    process.feed(encode(Mark.LANDED) + encode(FIRST))
    assert process.state is State.RUNNING and process.every() == [process]


def test_a_claim_asks_for_one_job_until_the_pace_is_known_then_for_what_fits_the_window():
    pace = Pace(10)
    assert pace.want() == 1
    pace.ran(0.0001)
    assert pace.want() == 10 and pace.want(left=3) == 3
    slow = Pace(10)
    slow.ran(BATCH_WINDOW / 4)
    assert slow.want() == 4
    slow.ran(1.0)  # one slow job pulls the average past the window: one job at a time
    assert slow.want() == 1
    off = Pace(1)
    off.ran(0.0001)
    assert off.want() == 1


def test_a_claim_completes_one_keys_scope_and_the_plain_others_at_once():
    plain = [Finished(f"p{n}:n", "default") for n in range(3)]
    keyed = [
        Finished(f"k{n}:n", "default", scope=Scope("tests.per_account", "A", 1, 0, 0.0)) for n in range(2)
    ]
    assert split([]) == (None, [], [])
    assert split(plain) == (plain[0], plain[1:], [])
    assert split([plain[0], keyed[0], plain[1], keyed[1]]) == (keyed[0], [plain[0], plain[1]], [keyed[1]])
