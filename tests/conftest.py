"""Shared fixtures: a private, empty Redis database per test, and runjobs as a real subprocess."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connections

from tests.chaos import RedisServer

ROOT = Path(__file__).resolve().parent.parent

#: The Django Tasks backend's tests need a Tasks framework: Django 6.0's, or the backport on 5.2.
collect_ignore_glob = [] if find_spec("django.tasks") or find_spec("django_tasks") else ["*/test_*tasks*.py"]


@pytest.fixture(scope="session")
def redis_url() -> str:
    return settings.REDIS_URL


@pytest.fixture(scope="session")
def _redis_guard(redis_url: str) -> redis.Redis:
    client = redis.Redis.from_url(redis_url)
    if client.dbsize():
        pytest.exit(
            f"Refusing to run: the test Redis database {redis_url} holds data. Point "
            "JOBS_TEST_REDIS_URL at an empty database.",
            returncode=3,
        )
    return client


#: Rows every migrated database has, made by post_migrate from the models alone: a flush keeps them.
STATIC_TABLES = {"django_content_type", "auth_permission"}


def _sql_flush(
    style: Any, connection: Any, reset_sequences: bool = True, allow_cascade: bool = False
) -> list[str]:
    """What the flush after each transactional test runs: every table but STATIC_TABLES emptied, on
    PostgreSQL by DELETE (TRUNCATE creates and syncs new files for every table: about 10 times the
    time of deleting a test's few rows; foreign keys are checked at the commit, when all are gone)."""
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    tables = [table for table in tables if table not in STATIC_TABLES]
    if connection.vendor == "postgresql" and not reset_sequences:
        deletes = [f"DELETE FROM {connection.ops.quote_name(table)}" for table in tables]
        return ["SET CONSTRAINTS ALL DEFERRED", *deletes]
    return connection.ops.sql_flush(
        style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
    )


@pytest.fixture(scope="session", autouse=True)
def _quick_flush() -> Iterator[None]:
    """The flush after each transactional test, as Django's but for two costs that buy a test nothing:
    rebuilding the content types and permissions (post_migrate) it had just deleted, and TRUNCATE on
    PostgreSQL. A flush still leaves every other table empty, on the same real database."""
    from django.core.management.commands import flush

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flush, "sql_flush", _sql_flush)
        patch.setattr(flush, "emit_post_migrate_signal", lambda *args, **kwargs: None)
        yield


@pytest.fixture(autouse=True)
def redis_db(_redis_guard: redis.Redis) -> Iterator[redis.Redis]:
    """An empty Redis database for each test, flushed before and after."""
    _redis_guard.flushdb()
    yield _redis_guard
    _redis_guard.flushdb()


@pytest.fixture
def fast(settings) -> None:
    """The "fast" durability level, for tests of what the outbox relay does at it (pushing a row its
    commit missed, pruning delivered rows): at the default, "ledger", a row lives until its job ran."""
    settings.JOBS = {**settings.JOBS, "DEFAULT_DURABILITY": "fast"}


@pytest.fixture
def restore_registry() -> Iterator[None]:
    """Jobs a test defines are forgotten after it, so they cannot clash or show up in checks."""
    from django_jobs.core import registry

    saved = dict(registry._registry)
    yield
    registry._registry.clear()
    registry._registry.update(saved)


@pytest.fixture(autouse=True)
def _clear_alerts() -> None:
    from tests.testapp.alerts import ALERTED

    ALERTED.clear()


def wait_for(predicate: Callable[[], object], timeout: float = 20, interval: float = 0.05) -> object:
    """Poll until ``predicate()`` is truthy; fail the test with a clear message after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


def outcome_count(name: str, outcome: str, queue: str = "default") -> float:
    """This process's job counter for one outcome of one job (read alone: the default registry holds
    the web-side gauges, which would read Redis)."""
    from prometheus_client import CollectorRegistry

    from django_jobs.telemetry import metrics

    local = CollectorRegistry()
    local.register(metrics.JOBS_TOTAL)
    labels = {"job": name, "queue": queue, "outcome": outcome}
    return local.get_sample_value("django_jobs_jobs_total", labels) or 0.0


class Runjobs:
    """``manage.py runjobs`` (or ``command``) in a subprocess, pointed at this test's databases and Redis."""

    def __init__(self, args: list[str], env: dict[str, str], command: str = "runjobs") -> None:
        self.log = open(ROOT / "var" / f"{command}-{os.getpid()}-{time.monotonic_ns()}.log", "w+b")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", command, *args, "--settings", "tests.settings"],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def terminate(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill_tree()
            return self.proc.wait()

    def kill_tree(self) -> None:
        """SIGKILL the whole process group, as a container kill or a cgroup OOM would."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


#: Each phase's report of a test ("setup", "call", "teardown"), so fixtures can see whether it passed.
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


#: Lines of each runjobs log a failed test prints.
LOG_TAIL = 200


def _passed(node: pytest.Item) -> bool:
    reports = node.stash.get(_REPORTS, {})
    return "call" in reports and all(report.passed for report in reports.values())


@pytest.fixture
def runjobs(redis_url: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., Runjobs]]:
    """Start runjobs subprocesses; their logs (in var/) are kept only when the test did not pass."""
    started: list[Runjobs] = []

    def start(*args: str, extra_env: dict[str, str] | None = None, command: str = "runjobs") -> Runjobs:
        env = {
            **os.environ,
            "JOBS_TEST_DB_NAME": str(connections["default"].settings_dict["NAME"]),
            "JOBS_TEST_REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            **(extra_env or {}),
        }
        process = Runjobs(list(args), env, command)
        started.append(process)
        return process

    yield start
    keep = not _passed(request.node)
    for process in started:
        process.kill_tree()
        if keep:  # shown in the failure's report (its teardown's stderr): CI keeps no var/
            tail = process.output().splitlines()[-LOG_TAIL:]
            print(f"--- runjobs pid {process.proc.pid} {process.log.name}, last lines ---", *tail, sep="\n",
                  file=sys.stderr)  # fmt: skip
        process.log.close()
        if not keep:
            Path(process.log.name).unlink(missing_ok=True)


@pytest.fixture
def private_redis(tmp_path: Path, settings) -> Iterator[RedisServer]:
    """A Redis server this test may stop, freeze and restart; the test's queues point at it."""
    server = RedisServer(tmp_path)
    server.start()
    settings.RQ_QUEUES = {name: {**config, "URL": server.url} for name, config in settings.RQ_QUEUES.items()}
    yield server
    server.close()


@pytest.fixture
def emails_redis(tmp_path: Path, settings) -> Iterator[RedisServer]:
    """A Redis server of this test's own for the queue "emails", the other queues staying where they
    are: queues on two Redis servers. Listed after ``private_redis``, both servers are private."""
    directory = tmp_path / "emails"
    directory.mkdir()
    server = RedisServer(directory)
    server.start()
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "emails": {**settings.RQ_QUEUES["emails"], "URL": server.url}}
    yield server
    server.close()


#: Seconds each outage lasts in the chaos tests; raise it (e.g. 600) for the long run.
OUTAGE_SECONDS = float(os.environ.get("JOBS_CHAOS_OUTAGE_SECONDS", "3"))
