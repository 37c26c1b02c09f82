"""The wheel a user installs: its name on the package index, and the monitoring files it ships."""

from __future__ import annotations

import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from django.core.management import call_command

from django_jobs.management.commands.jobs_deploy import FILES
from tests.acceptance.packaging import once_per_run
from tests.conftest import ROOT

pytestmark = [pytest.mark.acceptance, once_per_run]

#: "django-jobs" on the package index is an unrelated project (a job board, 2010).
DISTRIBUTION = "django-durable-jobs"


def test_the_wheel_is_published_under_a_name_of_our_own(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(archive.read(metadata).decode())
    assert headers["Name"] == DISTRIBUTION
    assert wheel.name.startswith("django_durable_jobs-")


def test_the_wheel_carries_the_license_the_project_urls_and_the_short_readme(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        headers = Parser().parsestr(archive.read(metadata).decode())
        shipped = archive.read(metadata.replace("METADATA", "licenses/LICENSE"))
    assert headers["License-Expression"] == "MIT" and headers["License-File"] == "LICENSE"
    assert shipped == (ROOT / "LICENSE").read_bytes()
    urls = dict(url.split(", ", 1) for url in headers.get_all("Project-URL"))
    assert {"Documentation", "Changelog", "Source"} <= set(urls)
    description = headers.get_payload()
    assert description.strip() == (ROOT / "README.md").read_text().strip()
    assert len(description.splitlines()) <= 300


def test_the_wheel_ships_the_alert_rules_and_the_dashboard(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        for relative in FILES.values():
            shipped = archive.read(f"django_jobs/deploy/{relative}")
            assert shipped == (ROOT / "django_jobs" / "deploy" / relative).read_bytes(), relative


def test_the_wheel_ships_the_store_scripts(wheel: Path):
    scripts = sorted((ROOT / "django_jobs" / "store" / "lua").glob("*.lua"))
    assert scripts
    with zipfile.ZipFile(wheel) as archive:
        for script in scripts:
            assert archive.read(f"django_jobs/store/lua/{script.name}") == script.read_bytes(), script.name


@pytest.mark.parametrize("what", sorted(FILES))
def test_jobs_deploy_prints_or_writes_each_file(what: str, tmp_path: Path, capsys):
    source = (ROOT / "django_jobs" / "deploy" / FILES[what]).read_text()
    call_command("jobs_deploy", what)
    assert capsys.readouterr().out == source
    call_command("jobs_deploy", what, "--output", str(tmp_path / "out"))
    assert (tmp_path / "out").read_text() == source
