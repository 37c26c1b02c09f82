"""The settings object: one typed, frozen view of ``settings.JOBS``, validated once for every reader."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs import checks
from django_jobs.conf import DEFAULTS, JobsSettings, jobs_settings

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md"


def with_jobs(**changes):
    return override_settings(JOBS={**settings.JOBS, **changes})


def test_reads_follow_override_settings_and_are_typed():
    with with_jobs(LEASE_SECONDS=3, FINISHED_TTL=7.9, ALERT_HOOKS=("a.b",)):
        assert jobs_settings.LEASE_SECONDS == 3.0 and isinstance(jobs_settings.LEASE_SECONDS, float)
        assert jobs_settings.FINISHED_TTL == 7
        assert jobs_settings.ALERT_HOOKS == ["a.b"]
    default = settings.JOBS.get("LEASE_SECONDS", DEFAULTS["LEASE_SECONDS"])
    assert default == jobs_settings.LEASE_SECONDS


def test_one_frozen_object_per_jobs_dict():
    snapshot = jobs_settings.current()
    assert isinstance(snapshot, JobsSettings) and jobs_settings.current() is snapshot
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.MODE = "capture"  # type: ignore[misc]
    with with_jobs(MODE="capture"):
        assert jobs_settings.current() is not snapshot and jobs_settings.MODE == "capture"


@pytest.mark.parametrize(("key", "value"), [("ALERT_HOOKS", 5), ("IMPORT_MODULES", "tests.unit")])
def test_a_value_the_settings_object_cannot_read_is_reported_by_the_checks(key, value):
    with with_jobs(**{key: value}):
        found = [m for m in checks.check_settings() if m.id == "django_jobs.E014"]
        with pytest.raises((TypeError, ImproperlyConfigured)):  # what the reader raises at run time
            getattr(jobs_settings, key)
    assert len(found) == 1 and repr(key) in found[0].msg


def test_the_check_reports_what_the_reader_refuses_for_every_setting():
    refused = []
    for key in DEFAULTS:
        with with_jobs(**{key: object()}):
            try:
                getattr(jobs_settings, key)
            except Exception:
                refused.append(key)
                reported = [m for m in checks.check_settings() if m.id.startswith("django_jobs.E")]
                if not [m for m in reported if repr(key) in m.msg]:
                    pytest.fail(f"JOBS[{key!r}] is refused when read but no check reports it")
    assert "LEASE_SECONDS" in refused and "ALERT_HOOKS" in refused


def test_the_settings_reference_has_one_entry_per_setting():
    """docs/reference/settings.md holds the prose of each setting; its default and type are generated
    from JobsSettings when the site is built, so only the names can drift."""
    entries = re.findall(r"^```\{setting\} ([A-Z_]+)$", SETTINGS_PAGE.read_text(), re.MULTILINE)
    assert sorted(entries) == sorted(set(entries)) == sorted(DEFAULTS)
