"""Pytest fixtures for projects that use django_jobs (loaded automatically through an entry point)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from django_jobs.testing import Captured


@pytest.fixture
def jobs_captured() -> Iterator[Captured]:
    """Jobs enqueued during the test are recorded, not queued; assert on them."""
    from django_jobs.testing import capture_jobs

    with capture_jobs() as captured:
        yield captured


@pytest.fixture
def jobs_immediate() -> Iterator[None]:
    """Jobs enqueued during the test run inline, at commit inside a transaction."""
    from django_jobs.testing import immediate_jobs

    with immediate_jobs():
        yield
