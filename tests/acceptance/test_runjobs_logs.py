"""The runjobs fixture keeps a subprocess's log only for a test that failed, where it explains why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.packaging import once_per_run
from tests.conftest import ROOT

pytestmark = [pytest.mark.acceptance, once_per_run]

TESTS = """
def test_passes(runjobs):
    print("LOG", runjobs("--help").log.name)


def test_fails(runjobs):
    print("LOG", runjobs("--help").log.name)
    raise AssertionError("failed on purpose")
"""


def test_logs_of_passing_tests_are_deleted_and_of_failing_ones_kept(tmp_path: Path):
    (tmp_path / "test_inner.py").write_text(TESTS)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-s",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), str(tmp_path / "test_inner.py")],
        cwd=ROOT, env=os.environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    passed_log, failed_log = (Path(p) for p in re.findall(r"LOG (\S+)", result.stdout))
    try:
        assert not passed_log.exists()
        assert failed_log.exists()
    finally:
        failed_log.unlink(missing_ok=True)
