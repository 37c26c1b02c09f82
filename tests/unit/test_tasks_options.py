"""The Tasks backend's OPTIONS: defaults, per-task overrides, and a clear problem for each bad value,
kept under its scope so that a bad entry stops its own task only."""

from __future__ import annotations

import pytest

from django_jobs.policy import RetryPolicy
from django_jobs.tasks.options import DEFAULT_TIMEOUT, TaskSettings, parse
from tests.testapp.tasks import Voided

TASK = "billing.tasks.send_invoice"
ENTRY = f"TASKS['default']['OPTIONS']['TASKS'][{TASK!r}]"
FAST = RetryPolicy(max_attempts=2, base=1)


def test_no_options_give_every_task_a_finite_timeout_and_the_default_retry_policy():
    options = parse("default", {})
    assert options.settings_for(TASK) == TaskSettings(timeout=DEFAULT_TIMEOUT, retry=None, permanent=())
    assert (options.database, options.problems) == (None, {})


def test_backend_defaults_and_per_task_overrides():
    options = parse(
        "default",
        {
            "TIMEOUT": 20,
            "RETRY": {"max_attempts": 2, "base": 1},
            "DATABASE": "other",
            "TASKS": {TASK: {"timeout": 5, "permanent": ["tests.testapp.tasks.Voided"]}},
        },
    )
    assert options.problems == {}
    assert options.database == "other"
    assert options.settings_for("app.tasks.other") == TaskSettings(20.0, FAST, ())
    assert options.settings_for(TASK) == TaskSettings(5.0, FAST, (Voided,))


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"TIMOUT": 5}, "TASKS['default']['OPTIONS'] has an unknown key 'TIMOUT' (did you mean 'TIMEOUT'?)"),
        ({"TIMEOUT": 0}, "['TIMEOUT'] must be a positive, finite number of seconds, got 0"),
        ({"TIMEOUT": float("inf")}, "['TIMEOUT'] must be a positive, finite number of seconds, got inf"),
        ({"TIMEOUT": True}, "['TIMEOUT'] must be a positive, finite number of seconds, got True"),
        ({"RETRY": {"max_attempts": 0}}, "['RETRY'] must be a dict of RetryPolicy arguments"),
        ({"RETRY": {"attempts": 3}}, "unexpected keyword argument 'attempts'"),
        ({"RETRY": 3}, "['RETRY'] must be a dict of RetryPolicy arguments"),
        ({"PERMANENT": "app.Error"}, "['PERMANENT'] must be a list of exception classes' dotted paths"),
        ({"PERMANENT": ["django_jobs.policy.RetryPolicy"]}, "RetryPolicy', which is not an exception class"),
        ({"PERMANENT": ["nowhere.Error"]}, "'nowhere.Error', which cannot be imported (No module named"),
        ({"DATABASE": "elsewhere"}, "['DATABASE'] is 'elsewhere', which is not in settings.DATABASES"),
        ({"TASKS": ["a"]}, "['TASKS'] must be a dict of {task path: settings}"),
    ],
)
def test_each_bad_backend_value_is_a_problem_of_every_task(given, problem):
    options = parse("default", given)
    assert any(problem in found for found in options.problems_of(TASK)), options.problems
    assert options.problems_of("app.tasks.other") == options.problems_of(TASK)


def test_a_bad_task_entry_is_a_problem_of_that_task_only():
    tasks = {TASK: {"timeout": -1, "retries": 3}, "app.tasks.ok": {"timeout": 1}}
    options = parse("default", {"TASKS": tasks})
    assert options.problems_of("app.tasks.ok") == []
    assert options.problems_of(TASK) == [
        f"{ENTRY} has an unknown key 'retries' (did you mean 'retry'?)",
        f"{ENTRY}['timeout'] must be a positive, finite number of seconds, got -1",
    ]
    assert options.settings_for(TASK).timeout == DEFAULT_TIMEOUT  # the refused value's default stands


def test_options_that_are_not_a_dict():
    options = parse("jobs", ["TIMEOUT", 5])
    assert options.problems_of(TASK) == ["TASKS['jobs']['OPTIONS'] must be a dict, got ['TIMEOUT', 5]"]
