"""Every bad argument to the app's commands is one error line (a CommandError), never a traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.db import connections

pytestmark = pytest.mark.django_db(transaction=True)

TIMES = [
    "99999999999d",
    "999999999d",
    "-1d",
    "x",
    "2024-13-45",
    "0001-01-01T00:00+05:00",
    "9999-12-31T23:59-05:00",
]
IDS = ["abc", "999999999999999999999999", "0", "-3", "1.5", "9" * 5000]
NUMBERS = ["nan", "inf", "-1", "x", "1e999"]

CASES = [
    *[("deadletters", "list", "--since", value) for value in TIMES],
    *[("deadletters", "discard", "--until", value, "--yes") for value in TIMES],
    *[("deadletters", "show", value) for value in IDS],
    *[("deadletters", "requeue", value, "--yes") for value in IDS],
    *[("deadletters", "discard", "7", value, "--yes") for value in IDS],
    *[("deadletters", "list", "--limit", value) for value in ["-1", "x", "1e3", "9" * 30]],
    *[("deadletters", "requeue", "--all", "--yes", "--rate", value) for value in [*NUMBERS, "0"]],
    ("deadletters", "list", "--status", "lost"),
    ("deadletters", "list", "--reason", "x"),
    ("deadletters", "explode"),
    *[("jobs_health", "--max-age", value) for value in NUMBERS],
    ("jobs_health", "--skip", "everything"),
    *[("jobs_cancel", value) for value in ["not an id", "x" * 65, "semi;colon", "", "é"]],
    ("jobs_pause", "default", "--reason", "x" * 501),
    ("jobs_health", "--skip", "pauses"),
    *[("jobs_deploy", "alerts", "--output", path) for path in ["/no/such/dir/a.yml", "/", "/etc/hostname/a"]],
]


#: Only parsed, never run: were one accepted, the test would start a worker with these numbers.
RUNJOBS = [
    *[("--concurrency", value) for value in ["0", "-2", "x", "100000000", "9" * 30]],
    *[("--max-jobs", value) for value in ["-1", "x", "1.5"]],
    *[("--async-jobs", value) for value in ["0", "-1", "x", "2.5", "1001"]],
    *[("--metrics-port", value) for value in ["99999", "-1", "x"]],
]


@pytest.mark.parametrize("argv", CASES, ids=" ".join)
def test_a_bad_argument_is_a_command_error(argv):
    with pytest.raises(CommandError, match=r"^Error: argument "):  # rejected as it is parsed
        call_command(*argv, stdout=io.StringIO(), stderr=io.StringIO())


def test_a_write_that_fails_is_one_error_line():
    """What the argument's type cannot foresee (here a file the kernel refuses, even to root)."""
    with pytest.raises(CommandError, match=r"^Cannot write /proc/version: ") as failed:
        call_command("jobs_deploy", "alerts", "--output", "/proc/version", stderr=io.StringIO())
    assert failed.value.returncode == 2 and "\n" not in str(failed.value)


@pytest.mark.parametrize("argv", RUNJOBS, ids=" ".join)
def test_a_bad_runjobs_argument_is_a_command_error(argv):
    parser = load_command_class("django_jobs", "runjobs").create_parser("manage.py", "runjobs")
    with pytest.raises(CommandError, match=r"^Error: argument "):
        parser.parse_args(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ("deadletters", "list", "--since", "99999999999d"),
        ("deadletters", "show", "999999999999999999999999"),
        ("runjobs", "--metrics-port", "99999"),  # on the original code it fails before any fork
        ("jobs_deploy", "alerts", "--output", "/no/such/dir/alerts.yml"),
    ],
    ids=" ".join,
)
def test_from_a_terminal_it_is_one_error_line(argv, redis_url):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "JOBS_TEST_DB_NAME": str(connections["default"].settings_dict["NAME"]),
        "JOBS_TEST_REDIS_URL": redis_url,
    }
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (1, 2), done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and argv[-1][:20] in errors[0], done.stderr
