"""Fixtures of the acceptance tests that test the package as a user installs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acceptance.packaging import build_wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel of the checkout's current files per test run."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))
