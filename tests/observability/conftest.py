"""Fixtures for the observability tests: a web server with ``/metrics``, Prometheus, and scraping."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections
from prometheus_client.parser import text_string_to_metric_families

from tests.chaos import closed_port, free_port, wait_port
from tests.conftest import ROOT, Runjobs

OBS_SETTINGS = "tests.observability.settings"


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Exposition text as {(sample name, labels): value}."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def tool(name: str) -> str:
    """A Prometheus binary (Debian package ``prometheus``): skipped where absent, required in CI."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed (apt-get install prometheus)")
        pytest.skip(f"{name} is not installed (apt-get install prometheus)")
    return path


#: Lint problems of other packages' metrics on the same page: django-rq names a Summary ``..._total``.
NOT_OURS = ("rq_request_processing_seconds_total ",)


def promtool_check_metrics(text: str) -> None:
    """``promtool check metrics`` finds no problem in the page, apart from ``NOT_OURS``."""
    result = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    output = (result.stdout + result.stderr).decode()
    problems = [line for line in output.splitlines() if line and not line.startswith(NOT_OURS)]
    assert not problems, output


class Service:
    """A server subprocess in its own session, its output in a file for failure messages."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log
        self.log = log.open("w+b")
        self.proc = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.log.close()


@pytest.fixture
def metered_runjobs(runjobs, tmp_path: Path) -> Callable[..., tuple[Runjobs, int]]:
    """``runjobs --metrics-port`` on loopback; returns it and its port. Its metric files live under
    ``tmp_path`` (TMPDIR), so one killed at teardown leaves nothing in the system's temp directory."""

    def start(*args: str, port: int = 0) -> tuple[Runjobs, int]:
        port = port or free_port()
        metrics = ["--metrics-port", str(port), "--metrics-addr", "127.0.0.1"]
        return runjobs(*args, *metrics, extra_env={"TMPDIR": str(tmp_path)}), port

    return start


@pytest.fixture
def redis_down(settings) -> None:
    """Every queue points at a loopback port nothing listens on."""
    url = f"redis://127.0.0.1:{closed_port()}/0"
    settings.RQ_QUEUES = {name: {**config, "URL": url} for name, config in settings.RQ_QUEUES.items()}


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in started:
        service.stop()


@pytest.fixture
def web_server(services: list[Service], redis_url: str, tmp_path: Path) -> Callable[[], int]:
    """``runserver`` with django-prometheus's ``/metrics``, on this test's databases; returns its port."""

    def start() -> int:
        port = free_port()
        env = {
            **os.environ,
            "JOBS_TEST_DB_NAME": str(connections["default"].settings_dict["NAME"]),
            "JOBS_TEST_REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": OBS_SETTINGS,
        }
        args = [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"]
        service = Service(args, tmp_path / "web.log", env)
        services.append(service)
        wait_port(port, timeout=30)
        return port

    return start
