"""The supervisor's view of one work process: one state, changed only by the transition table, and
what the process's death leaves to settle follows from that state alone."""

from __future__ import annotations

import logging

import pytest

from django_jobs.worker.protocol import Mark, Started, encode
from django_jobs.worker.slot import INITIAL, TRANSITIONS, Event, Settlement, Slot, State

START = Started("job-1:n0", "default", 1234.5, 987654321)


def slot_after(*events: Event) -> Slot:
    slot = Slot(7, -1, "host.7")
    slot.feed(encode(START))
    for event in events:
        assert slot.on(event), f"{event} refused while {slot.state}"
    return slot


def test_a_plain_job_runs_returns_completes_and_goes_idle():
    slot = Slot(7, -1, "host.7")
    assert slot.state is State.STARTING and slot.settlement is Settlement.NOTHING
    slot.feed(encode(START))
    assert (slot.state, slot.token, slot.started) == (State.RUNNING, START.token, [("job-1", "default")])
    assert slot.settlement is Settlement.LOST
    slot.feed(encode(Mark.RETURNED) + encode(Mark.COMPLETING))
    assert slot.state is State.COMPLETING and slot.settlement is Settlement.COMPLETION  # published
    slot.feed(encode(Mark.DONE))
    assert slot.state is State.IDLE and slot.attempt is None and slot.settlement is Settlement.NOTHING


JOB = [("job-1", "default")]


@pytest.mark.parametrize(
    ("reports", "returned", "raised"),
    [
        ((Mark.RETURNED, Mark.COMPLETING, Mark.DONE), JOB, []),
        ((Mark.RAISED,), [], []),  # its failure is being settled: retried or dead-lettered, not yet known
        ((Mark.RAISED, Mark.DONE), [], JOB),  # settled: the ledger asks whether it was dead-lettered
        ((Mark.DONE,), [], []),  # nothing ran (an undecodable job, settled as it was)
    ],
    ids=["returned", "raising", "raised", "done"],
)
def test_the_ledger_hears_of_an_attempt_that_returned_or_whose_failure_is_settled(reports, returned, raised):
    slot = slot_after()
    slot.feed(b"".join(encode(report) for report in reports))
    assert (slot.returned, slot.raised) == (returned, raised)


def test_a_return_read_after_a_kill_still_counts_as_the_job_having_run():
    slot = slot_after(Event.OVERRAN)  # killed past its timeout; its last report was written before
    slot.feed(encode(Mark.RETURNED))
    assert slot.state is State.KILLED_RETURNED and slot.returned == [("job-1", "default")]


def test_an_illegal_transition_is_refused_in_one_line_and_the_state_kept(caplog):
    slot = Slot(7, -1, "host.7")
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        assert not slot.on(Event.RETURNED)  # nothing runs: nothing can return
    assert slot.state is State.STARTING
    (record,) = caplog.records
    assert "refused" in record.getMessage() and "\n" not in record.getMessage()


def test_a_second_start_report_while_running_is_refused_and_the_first_attempt_kept():
    slot = slot_after()
    slot.feed(encode(Started("job-2:n0", "default", 1.0, 1)))
    assert slot.state is State.RUNNING and slot.token == START.token
    assert slot.started == [("job-1", "default")]


@pytest.mark.parametrize(
    ("events", "settlement"),
    [
        ((Event.OVERRAN,), Settlement.TIMEOUT),
        ((Event.RAISED, Event.OVERRAN), Settlement.TIMEOUT),
        ((Event.OVERRAN, Event.RAISED), Settlement.TIMEOUT),
        ((Event.RETURNED, Event.OVERRAN), Settlement.COMPLETE),  # the code returned: a success
        ((Event.OVERRAN, Event.RETURNED), Settlement.COMPLETE),  # read after the kill, written before
        ((Event.CANCEL, Event.GRACE_OVER), Settlement.CANCEL),
        ((Event.CANCEL, Event.RETURNED), Settlement.COMPLETE),  # the completion won the race
        ((Event.FENCE,), Settlement.NOTHING),  # whoever took the lease settles the job
        ((Event.FENCE, Event.RETURNED), Settlement.NOTHING),
        ((Event.STOP,), Settlement.HAND_BACK),
        ((Event.OVERRAN, Event.STOP), Settlement.HAND_BACK),
        ((Event.OVERRAN, Event.DONE), Settlement.NOTHING),  # its attempt ended before the kill
        ((Event.OVERRAN, Event.RETURNED, Event.COMPLETING), Settlement.COMPLETION),  # its end published
    ],
    ids=lambda value: "-".join(value) if isinstance(value, tuple) else value.value,
)
def test_what_a_death_leaves_to_settle_follows_from_the_state(events, settlement):
    assert slot_after(*events).settlement is settlement


@pytest.mark.parametrize("event", [Event.CANCEL, Event.GRACE_OVER, Event.FENCE])
def test_an_attempt_whose_code_ended_is_not_stopped_again(event):
    """Its end is being settled: a cancel, a cancel kill or a fence has nothing left to stop."""
    assert not slot_after(Event.RETURNED).on(event)
    assert not slot_after(Event.RAISED).on(event)


def test_every_state_is_reachable_and_every_state_but_exited_can_exit():
    reached, frontier = set(INITIAL), list(INITIAL)
    while frontier:
        for target in TRANSITIONS[frontier.pop()].values():
            if target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(State)
    living = [state for state in State if state is not State.EXITED]
    assert all(TRANSITIONS[state].get(Event.EXIT) is State.EXITED for state in living)
    assert TRANSITIONS[State.EXITED] == {}


def test_an_exited_slot_takes_no_report():
    slot = slot_after(Event.EXIT)
    slot.feed(encode(Mark.RETURNED))
    assert slot.state is State.EXITED
