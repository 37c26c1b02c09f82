"""Jobs runjobs would not know: reported by ``manage.py check``, explained by ``JobNotFound``, and
fixed by ``JOBS["IMPORT_MODULES"]``."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs import checks
from django_jobs.conf import jobs_settings
from django_jobs.core import registry
from django_jobs.exceptions import JobNotFound
from tests.conftest import ROOT

OUTSIDE = "tests.unit.outside_jobs"


def w004(messages):
    return {m.obj.__module__: m for m in messages if m.id == "django_jobs.W004"}


def test_a_job_defined_outside_the_job_modules_is_reported_with_the_fix():
    importlib.import_module(OUTSIDE)  # registered after start-up, as a view's import would
    message = w004(checks.check_job_modules())[OUTSIDE]
    assert "tests.outside" in message.msg and "dead-letter" in message.msg
    assert "jobs.py" in message.hint and f"'{OUTSIDE}'" in message.hint and "IMPORT_MODULES" in message.hint


def test_listing_the_module_in_import_modules_silences_the_warning():
    importlib.import_module(OUTSIDE)
    with override_settings(JOBS={**settings.JOBS, "IMPORT_MODULES": [OUTSIDE]}):
        assert OUTSIDE not in w004(checks.check_job_modules())


def test_jobs_of_the_apps_jobs_modules_are_not_reported():
    assert not [module for module in w004(checks.check_job_modules()) if module.startswith("tests.testapp")]


def test_job_not_found_says_where_jobs_must_live():
    with pytest.raises(JobNotFound) as caught:
        registry.get("billing.nowhere")
    assert "jobs.py" in str(caught.value) and "IMPORT_MODULES" in str(caught.value)


def _django(*args: str, import_modules: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.unit.job_modules_settings",
        "JOBS_TEST_IMPORT_MODULES": json.dumps(import_modules),
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def test_manage_py_check_warns_about_a_job_only_the_web_side_imports():
    result = _django("check", import_modules=[])
    assert result.returncode == 0, result.stderr
    assert "django_jobs.W004" in result.stderr and "tests.outside" in result.stderr


def test_import_modules_are_imported_at_start_up_and_the_check_is_clean():
    result = _django("check", import_modules=[OUTSIDE])
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr
    probe = "from django_jobs.core import registry; print(registry.get('tests.outside').name)"
    imported = _django("shell", "-v", "0", "-c", probe, import_modules=[OUTSIDE])
    assert imported.stdout.strip() == "tests.outside", imported.stderr


@pytest.mark.parametrize("value", ["tests.unit.outside_jobs", [42], None])
def test_import_modules_must_be_a_list_of_module_paths(value):
    given = override_settings(JOBS={**settings.JOBS, "IMPORT_MODULES": value})
    with given, pytest.raises(ImproperlyConfigured, match="IMPORT_MODULES"):
        print(jobs_settings.IMPORT_MODULES)
