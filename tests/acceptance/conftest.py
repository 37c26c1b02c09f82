"""Fixtures of the acceptance tests: the wheel of the package as a user installs it, and an audit of
every Redis a test used once it is over.

Each test's Redis servers are audited (``django_jobs.store.audit``) after the test, once its runjobs
are stopped and before a private server closes: a problem fails the test. A test that breaks Redis on
purpose says so with ``@pytest.mark.unaudited("why")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from django_jobs.store import Store
from django_jobs.store.audit import audit
from tests.acceptance.packaging import build_wheel
from tests.chaos import RedisServer
from tests.conftest import Runjobs

#: The runjobs a test started, stopped before its Redis is audited.
_STARTED = pytest.StashKey[list[Runjobs]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "unaudited(reason): the test leaves Redis broken on purpose; its audit is skipped"
    )


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel of the checkout's current files per test run."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def _audit(request: pytest.FixtureRequest, url: str) -> None:
    """Stop the test's runjobs (killed, as teardown would: what a kill leaves must pass too), then
    fail the test if the auditor finds a problem in the Redis at ``url``."""
    if request.node.get_closest_marker("unaudited") is not None:
        return
    for process in request.node.stash.get(_STARTED, []):
        process.kill_tree()
    client = redis.Redis.from_url(url)
    try:
        found = audit(Store.of(client))
    finally:
        client.close()
    assert found.ok, f"the auditor found in {url}:\n" + "\n".join(str(problem) for problem in found.problems)


@pytest.fixture(autouse=True)
def audited(request: pytest.FixtureRequest, redis_db: redis.Redis, redis_url: str) -> Iterator[None]:
    """The test's Redis database, audited after the test (before it is flushed)."""
    yield
    _audit(request, redis_url)


@pytest.fixture
def runjobs(runjobs: Callable[..., Runjobs], request: pytest.FixtureRequest) -> Callable[..., Runjobs]:
    """The root ``runjobs``, remembering what it started so the audit can stop it first."""
    started = request.node.stash.setdefault(_STARTED, [])

    def start(*args: str, extra_env: dict[str, str] | None = None, command: str = "runjobs") -> Runjobs:
        process = runjobs(*args, extra_env=extra_env, command=command)
        started.append(process)
        return process

    return start


@pytest.fixture
def private_redis(private_redis: RedisServer, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """The root ``private_redis``, audited before it closes."""
    yield private_redis
    _audit(request, private_redis.url)


@pytest.fixture
def emails_redis(emails_redis: RedisServer, request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """The root ``emails_redis``, audited before it closes."""
    yield emails_redis
    _audit(request, emails_redis.url)
