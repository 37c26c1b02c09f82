"""@job and the registry: validated at decoration, looked up by stable name, never by import path."""

from __future__ import annotations

import math

import pytest
from django.conf import settings
from django.test import override_settings

from django_jobs import RetryPolicy, job
from django_jobs.core import registry
from django_jobs.exceptions import JobNotFound, JobsError
from tests.testapp import jobs

pytestmark = pytest.mark.usefixtures("restore_registry")


def assert_not_registered(name):
    with pytest.raises(JobNotFound):
        registry.get(name)


# --- timeout -------------------------------------------------------------------------------------


def test_bare_decorator_without_timeout_raises():
    with pytest.raises(ValueError, match=r"needs timeout= \(seconds\)"):

        @job
        def no_timeout():
            pass

    assert_not_registered(f"{__name__}.test_bare_decorator_without_timeout_raises.<locals>.no_timeout")


def test_decorator_call_without_timeout_raises_naming_the_job():
    with pytest.raises(ValueError, match=r"@job 'unit.reg.no_timeout' needs timeout="):

        @job(name="unit.reg.no_timeout")
        def no_timeout():
            pass

    assert_not_registered("unit.reg.no_timeout")


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (None, r"needs timeout="),
        (0, r"timeout must be positive, got 0"),
        (-1, r"timeout must be positive, got -1"),
        (-0.5, r"timeout must be positive"),
        (math.inf, r"timeout must be a finite number of seconds, got inf"),
        (math.nan, r"timeout must be a finite number of seconds, got nan"),
        ("5", r"timeout must be a finite number of seconds, got '5'"),
        (True, r"timeout must be a finite number of seconds, got True"),
        ([5], r"timeout must be a finite number of seconds"),
    ],
)
def test_bad_timeout_raises_at_decoration(timeout, message):
    with pytest.raises(ValueError, match=rf"@job 'unit.reg.bad_timeout'.*{message}"):

        @job(name="unit.reg.bad_timeout", timeout=timeout)
        def bad_timeout():
            pass

    assert_not_registered("unit.reg.bad_timeout")


@pytest.mark.parametrize("timeout", [1, 0.25, 600])
def test_good_timeout_is_kept_in_seconds(timeout):
    @job(name="unit.reg.good_timeout", timeout=timeout)
    def good_timeout():
        pass

    assert good_timeout.timeout == float(timeout)


# --- retry and permanent -------------------------------------------------------------------------


@pytest.mark.parametrize("retry", [{"max_attempts": 3}, 3, "fast", RetryPolicy])
def test_bad_retry_type_raises(retry):
    with pytest.raises(ValueError, match=r"@job 'unit.reg.bad_retry': retry= takes a RetryPolicy"):

        @job(name="unit.reg.bad_retry", timeout=5, retry=retry)
        def bad_retry():
            pass

    assert_not_registered("unit.reg.bad_retry")


@pytest.mark.parametrize(
    "permanent", ["ValueError", ValueError("x"), int, (ValueError, object), [KeyError, None], None]
)
def test_bad_permanent_entries_raise(permanent):
    with pytest.raises(
        ValueError, match=r"@job 'unit.reg.bad_permanent': permanent= takes exception classes"
    ):

        @job(name="unit.reg.bad_permanent", timeout=5, permanent=permanent)
        def bad_permanent():
            pass

    assert_not_registered("unit.reg.bad_permanent")


@pytest.mark.parametrize(
    ("permanent", "expected"),
    [(ValueError, (ValueError,)), ((ValueError, KeyError), (ValueError, KeyError)), ([OSError], (OSError,))],
)
def test_permanent_accepts_a_class_a_tuple_or_a_list(permanent, expected):
    @job(name="unit.reg.permanent", timeout=5, permanent=permanent)
    def ok():
        pass

    assert ok.permanent == expected


def test_bad_queue_value_raises():
    with pytest.raises(ValueError, match=r"queue must be a non-empty string"):

        @job(name="unit.reg.bad_queue", timeout=5, queue="")
        def bad_queue():
            pass


# --- names ---------------------------------------------------------------------------------------


def test_default_name_is_the_dotted_path():
    @job(timeout=5)
    def send_welcome(user_id):
        return user_id

    expected = f"{__name__}.test_default_name_is_the_dotted_path.<locals>.send_welcome"
    assert send_welcome.name == expected
    assert registry.get(expected) is send_welcome


def test_name_overrides_the_dotted_path():
    @job(name="unit.reg.welcome", timeout=5)
    def send_welcome():
        pass

    assert send_welcome.name == "unit.reg.welcome"
    assert registry.get("unit.reg.welcome") is send_welcome
    assert_not_registered(f"{__name__}.test_name_overrides_the_dotted_path.<locals>.send_welcome")


def test_aliases_resolve_to_the_job():
    @job(name="unit.reg.new", aliases=["unit.reg.old", "unit.reg.older"], timeout=5)
    def renamed():
        pass

    assert registry.get("unit.reg.old") is renamed
    assert registry.get("unit.reg.older") is renamed
    assert registry.get("unit.reg.new") is renamed
    assert [j for j in registry.all_jobs() if j.func is renamed.func] == [renamed]  # listed once


def test_testapp_alias_resolves():
    assert registry.get("tests.old_name") is jobs.renamed


def test_a_single_string_alias_is_not_split_into_characters():
    # aliases="unit.old" is an easy slip; it must not register "u", "n", "i", "t", "." ... as job names.
    try:

        @job(name="unit.reg.single_alias", aliases="unit.old", timeout=5)
        def single_alias():
            pass

    except ValueError:
        pass  # refusing a bare string is fine
    else:
        assert registry.get("unit.old") is single_alias  # treating it as one alias is fine too
    for char in "unit.old":
        assert_not_registered(char)


def test_a_different_function_under_a_taken_name_raises():
    @job(name="unit.reg.taken", timeout=5)
    def first():
        return 1

    with pytest.raises(ValueError, match=r"Job name 'unit.reg.taken' is already taken by .*first"):

        @job(name="unit.reg.taken", timeout=5)
        def second():
            return 2

    assert registry.get("unit.reg.taken") is first


def test_an_alias_that_clashes_registers_nothing():
    @job(name="unit.reg.owner", timeout=5)
    def owner():
        pass

    with pytest.raises(ValueError, match=r"Job name 'unit.reg.owner' is already taken"):

        @job(name="unit.reg.newcomer", aliases=["unit.reg.owner"], timeout=5)
        def newcomer():
            pass

    assert_not_registered("unit.reg.newcomer")
    assert registry.get("unit.reg.owner") is owner


def test_taking_the_name_of_a_testapp_job_raises():
    with pytest.raises(ValueError, match=r"'tests.record' is already taken"):

        @job(name="tests.record", timeout=5)
        def impostor(key):
            pass

    assert registry.get("tests.record") is jobs.record


def test_redecorating_the_same_function_is_allowed():
    def make():
        def handler():
            return "v2"

        return handler

    old = job(name="unit.reg.reloaded", timeout=5)(make())
    new = job(name="unit.reg.reloaded", timeout=5)(make())  # same module and qualname, as after a reload
    assert old.func is not new.func
    assert registry.get("unit.reg.reloaded") is new


def test_redecorating_the_very_same_function_object_is_allowed():
    def handler():
        pass

    job(timeout=5)(handler)
    again = job(timeout=5)(handler)
    assert registry.get(again.name) is again


# --- lookup never imports ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["os.system", "subprocess.call", "builtins.eval", "tests.testapp.jobs.record", ""]
)
def test_get_never_imports_a_dotted_path(name):
    with pytest.raises(JobNotFound, match=r"No job is registered under the name"):
        registry.get(name)


def test_job_not_found_is_a_jobs_error():
    with pytest.raises(JobsError):
        registry.get("os.system")


# --- calling and enqueueing ----------------------------------------------------------------------


# --- retry policy --------------------------------------------------------------------------------


def test_policy_falls_back_to_default_retry_read_at_access_time():
    @job(name="unit.reg.default_policy", timeout=5)
    def uses_default():
        pass

    assert uses_default.retry is None
    assert uses_default.policy == RetryPolicy()
    custom = {"max_attempts": 2, "base": 1.0, "factor": 3.0, "max_delay": 10.0}
    with override_settings(JOBS={**settings.JOBS, "DEFAULT_RETRY": custom}):
        assert uses_default.policy == RetryPolicy(**custom)
    with override_settings(JOBS={**settings.JOBS, "DEFAULT_RETRY": {"max_attempts": 9}}):
        assert uses_default.policy == RetryPolicy(max_attempts=9)
    assert uses_default.policy == RetryPolicy()


def test_explicit_retry_wins_over_default_retry():
    mine = RetryPolicy(max_attempts=1)

    @job(name="unit.reg.own_policy", timeout=5, retry=mine)
    def own_policy():
        pass

    with override_settings(JOBS={**settings.JOBS, "DEFAULT_RETRY": {"max_attempts": 9}}):
        assert own_policy.policy is mine
