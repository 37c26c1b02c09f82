"""Unit tests need no network: Redis and the database servers may be down while they run."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def redis_db() -> None:
    """Replaces the suite-wide fixture that empties a Redis database around every test."""


#: Fixtures that reach a server; a unit test that asks for one belongs in tests/integration.
NETWORK_FIXTURES = {"_redis_guard", "redis_url", "private_redis", "emails_redis", "runjobs", "live_server"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit = config.rootpath / "tests" / "unit"
    for item in items:
        wanted = NETWORK_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if item.path.is_relative_to(unit) and wanted:
            raise pytest.UsageError(f"{item.nodeid} is a unit test but uses {', '.join(sorted(wanted))}.")
