"""RetryPolicy: full-jitter exponential backoff, validated at construction; classify: retry or dead."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from django_jobs.exceptions import JobTimeout, PayloadError, PermanentError, WorkerLost
from django_jobs.policy import RetryPolicy, Verdict, classify


class Invalid(Exception):
    pass


class StillInvalid(Invalid):
    pass


def test_defaults():
    policy = RetryPolicy()
    assert (policy.base, policy.factor, policy.max_attempts, policy.max_delay) == (30.0, 2.0, 5, 3600.0)


def test_policy_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RetryPolicy().max_attempts = 10  # type: ignore[misc]


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 30), (2, 60), (3, 120), (4, 240), (5, 480), (6, 960), (7, 1920), (8, 3600), (9, 3600), (40, 3600)],
)
def test_default_ceiling_doubles_from_30_seconds_up_to_an_hour(attempt, expected):
    assert RetryPolicy().ceiling(attempt) == expected


@pytest.mark.parametrize(
    "policy",
    [
        RetryPolicy(base=0.5, factor=3, max_delay=100),
        RetryPolicy(base=2, factor=1),
        RetryPolicy(base=10, factor=1.5, max_delay=50),
        RetryPolicy(base=0),
    ],
)
def test_ceiling_is_min_of_max_delay_and_exponential(policy):
    for attempt in range(1, 30):
        expected = min(policy.max_delay, policy.base * policy.factor ** (attempt - 1))
        assert policy.ceiling(attempt) == pytest.approx(expected, rel=1e-12, abs=0)


def test_max_delay_below_base_caps_the_first_wait_too():
    assert RetryPolicy(base=30, max_delay=5).ceiling(1) == 5


@pytest.mark.parametrize("attempt", [1, 2, 3, 8, 50])
def test_delay_is_within_zero_and_ceiling_and_spread_over_the_range(attempt):
    policy = RetryPolicy()
    ceiling = policy.ceiling(attempt)
    rng = random.Random(20260329)
    draws = [policy.delay(attempt, rng) for _ in range(2000)]
    assert all(0 <= d <= ceiling for d in draws)
    assert min(draws) < 0.1 * ceiling
    assert max(draws) > 0.9 * ceiling
    assert 0.4 * ceiling < sum(draws) / len(draws) < 0.6 * ceiling  # uniform: "full jitter"
    assert len(set(draws)) > 1900  # a burst of failures does not come back as a burst of retries


def test_delay_uses_the_given_random_generator():
    policy = RetryPolicy()
    first = [policy.delay(4, random.Random(7)) for _ in range(3)]
    again = [policy.delay(4, random.Random(7)) for _ in range(3)]
    assert first == again
    assert first[0] != policy.delay(4, random.Random(8))


def test_delay_without_a_generator_is_still_in_range():
    policy = RetryPolicy(base=1, factor=2, max_delay=8)
    draws = [policy.delay(3) for _ in range(500)]
    assert all(0 <= d <= 4 for d in draws)
    assert len(set(draws)) > 1


@pytest.mark.parametrize("attempt", [1_100, 10_000, 10**9, 10**400], ids=["1100", "1e4", "1e9", "1e400"])
def test_huge_attempt_numbers_do_not_overflow(attempt):
    policy = RetryPolicy()
    assert policy.ceiling(attempt) == 3600
    delay = policy.delay(attempt, random.Random(1))
    assert 0 <= delay <= 3600 and math.isfinite(delay)


@pytest.mark.parametrize("attempt", [1_100, 10**9, 10**400], ids=["1100", "1e9", "1e400"])
def test_huge_attempt_numbers_keep_the_formula_for_edge_policies(attempt):
    assert RetryPolicy(base=5, factor=1).ceiling(attempt) == 5  # factor 1: a constant wait
    assert RetryPolicy(base=0).ceiling(attempt) == 0  # base 0: never wait, however many attempts
    assert RetryPolicy(base=0).delay(attempt, random.Random(1)) == 0


def test_edge_values_that_are_valid():
    assert RetryPolicy(max_attempts=1).max_attempts == 1
    assert RetryPolicy(base=0, factor=1, max_delay=0).ceiling(3) == 0
    assert RetryPolicy(base=1, factor=2, max_delay=10).ceiling(2) == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": "5"}, "max_attempts"),
        ({"max_attempts": None}, "max_attempts"),
        ({"base": -1}, "base"),
        ({"base": math.nan}, "base"),
        ({"base": math.inf}, "base"),
        ({"base": True}, "base"),
        ({"base": "30"}, "base"),
        ({"factor": 0.5}, "factor"),
        ({"factor": 0}, "factor"),
        ({"factor": math.nan}, "factor"),
        ({"factor": False}, "factor"),
        ({"factor": "2"}, "factor"),
        ({"max_delay": -0.1}, "max_delay"),
        ({"max_delay": math.nan}, "max_delay"),
        ({"max_delay": math.inf}, "max_delay"),
        ({"max_delay": None}, "max_delay"),
    ],
)
def test_bad_policies_raise_value_error_at_construction(kwargs, field):
    with pytest.raises(ValueError, match=rf"Bad RetryPolicy: .*{field}"):
        RetryPolicy(**kwargs)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ValueError, match=r"max_attempts.*base.*factor"):
        RetryPolicy(max_attempts=0, base=-1, factor=0)


# --- classify ------------------------------------------------------------------------------------

POLICY = RetryPolicy(max_attempts=4)


@pytest.mark.parametrize(
    ("exc", "permanent"),
    [
        (PermanentError("voided"), ()),
        (PayloadError("bad args"), ()),
        (Invalid("bad input"), (Invalid,)),
        (StillInvalid("bad input"), (Invalid,)),  # subclasses count
        (KeyError("x"), (Invalid, LookupError)),
    ],
)
def test_permanent_errors_are_dead_on_the_first_attempt(exc, permanent):
    assert classify(exc, attempt=1, policy=POLICY, permanent=permanent) is Verdict.DEAD


@pytest.mark.parametrize(
    "exc", [ConnectionError("down"), Invalid("not listed"), JobTimeout(), WorkerLost(), RuntimeError()]
)
def test_other_errors_retry_until_the_last_attempt_then_die(exc):
    verdicts = [classify(exc, attempt=n, policy=POLICY, permanent=(KeyError,)) for n in range(1, 7)]
    assert verdicts == [Verdict.RETRY, Verdict.RETRY, Verdict.RETRY, Verdict.DEAD, Verdict.DEAD, Verdict.DEAD]


def test_a_single_attempt_policy_never_retries():
    assert (
        classify(ConnectionError(), attempt=1, policy=RetryPolicy(max_attempts=1), permanent=())
        is Verdict.DEAD
    )


def test_a_parent_class_of_a_permanent_exception_is_not_permanent():
    assert classify(Exception("x"), attempt=1, policy=POLICY, permanent=(Invalid,)) is Verdict.RETRY
