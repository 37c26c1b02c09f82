"""The lifecycle table is whole: every state has a place and a way in, the keys come from it."""

from __future__ import annotations

from django_jobs.store import keys, lifecycle
from django_jobs.store.lifecycle import STATES, STRUCTURES, TRANSITIONS, State, Status


def test_every_state_has_a_place_and_a_way_in() -> None:
    assert set(STATES) == set(State)
    reached = {target for t in TRANSITIONS for target in t.targets}
    assert reached == set(State)


def test_every_waiting_or_live_state_has_a_way_out() -> None:
    left = {source for t in TRANSITIONS for source in t.sources}
    assert left == set(State)


def test_every_ended_status_is_an_ended_state_without_a_holder() -> None:
    for status in lifecycle.ENDED:
        state = lifecycle.ended_state(status, {})
        assert STATES[state].status is status
        assert STATES[state].structures == ()


def test_the_ended_cancellations_are_told_apart_by_their_flags() -> None:
    assert lifecycle.ended_state(Status.CANCELED, {lifecycle.F.EXPIRED: b"1"}) is State.EXPIRED
    assert lifecycle.ended_state(Status.CANCELED, {lifecycle.F.REPLACED_BY: b"x"}) is State.REPLACED
    assert lifecycle.ended_state(Status.CANCELED, {}) is State.CANCELLED


def test_a_scheduled_job_is_a_retry_once_an_attempt_counted_else_a_snooze_or_plain() -> None:
    f = lifecycle.F
    assert lifecycle.scheduled_state({f.ATTEMPT: b"1", f.SNOOZES: b"2"}) is State.RETRYING
    assert lifecycle.scheduled_state({f.ATTEMPT: b"0", f.SNOOZES: b"2"}) is State.SNOOZED
    assert lifecycle.scheduled_state({f.ATTEMPT: b"garbage"}) is State.SCHEDULED


def test_key_names_are_the_table_patterns() -> None:
    assert keys.job_key("a") == "rq:job:a"
    assert keys.parked_line("q", "name\nvalue") == "djjobs:parked:q\nname\nvalue"
    assert keys.rate_prefix("s") == "djjobs:rate:s:"
    assert keys.quarantine_key("k", 1.5) == "djjobs:quarantine:k:1.500000"
    layout = keys.queue_layout("q")
    assert layout.list == keys.queue_key("q") and layout.wip == keys.wip_key("q")
    assert (layout.high, layout.low) == keys.priority_keys("q")
    assert layout.lines == keys.parked_index("q") and layout.wake == keys.wake_key("q")


def test_every_structure_pattern_is_distinct() -> None:
    patterns = [s.pattern for s in STRUCTURES.values()]
    assert len(patterns) == len(set(patterns))
