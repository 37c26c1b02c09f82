"""End to end: a real Prometheus scrapes the web side and a runjobs, loads the shipped rules, and
the dead-letter alert fires when a job dead-letters."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos import free_port, wait_port
from tests.conftest import ROOT, Runjobs, wait_for
from tests.observability.conftest import Service, promtool_check_metrics, scrape, tool
from tests.testapp import jobs

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

DEPLOY = ROOT / "django_jobs" / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"

CONFIG = """
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["{rules}"]
scrape_configs:
  - job_name: web
    honor_labels: true
    static_configs: [{{targets: ["127.0.0.1:{web}"]}}]
  - job_name: workers
    honor_labels: true
    static_configs: [{{targets: ["127.0.0.1:{workers}"]}}]
"""


def test_rules_file_passes_promtool_check_and_its_unit_tests():
    unit_tests = sorted(str(path) for path in RULES.parent.glob("tests/*.yml"))
    for args in (["check", "rules", str(RULES)], ["test", "rules", *unit_tests]):
        result = subprocess.run([tool("promtool"), *args], capture_output=True, timeout=60)
        assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_the_dashboards_queries_are_valid_promql(tmp_path: Path):
    dashboard = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())
    variables = {"$__rate_interval": "5m", "$queue": ".*", "$job": ".*"}
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name, example in variables.items():
                target["expr"] = target["expr"].replace(name, example)
            queries.append({"record": f"panel:{panel['id']}:{target['refId']}", "expr": target["expr"]})
    rules = tmp_path / "dashboard.yml"
    rules.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": queries}]}))
    result = subprocess.run([tool("promtool"), "check", "rules", str(rules)], capture_output=True, timeout=60)
    assert result.returncode == 0 and len(queries) > 10, (result.stdout + result.stderr).decode()


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path: str, **params: str):
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())["data"]

    def firing(self, name: str) -> list[dict[str, str]]:
        alerts = self.api("alerts")["alerts"]
        return [a["labels"] for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]

    def ready(self) -> bool:
        """Its port opens before its storage is up; until then the API answers 503."""
        try:
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def query(self, promql: str) -> list[tuple[dict[str, str], str]]:
        return [(r["metric"], r["value"][1]) for r in self.api("query", query=promql)["result"]]


@pytest.fixture
def prometheus(services: list[Service], tmp_path: Path) -> Callable[[int, int], Prometheus]:
    def start(web: int, workers: int) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        config.write_text(CONFIG.format(rules=RULES, web=web, workers=workers))
        port = free_port()
        args = [
            tool("prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        services.append(Service(args, tmp_path / "prometheus.log"))
        server = Prometheus(port)
        wait_for(server.ready, timeout=20, interval=0.1)
        return server

    return start


@contextlib.contextmanager
def explained(services: list[Service], worker: Runjobs) -> Iterator[None]:
    """On a timeout, show what the servers said."""
    try:
        yield
    except AssertionError as exc:
        said = [f"--- {s.log_path.name}\n{s.output()[-4000:]}" for s in services]
        raise AssertionError("\n".join([str(exc), *said, f"--- runjobs\n{worker.output()[-4000:]}"])) from exc


def test_a_dead_letter_fires_the_alert_in_a_real_prometheus(
    metered_runjobs, web_server, prometheus, services
):
    worker, worker_port = metered_runjobs()
    web_port = web_server()
    wait_port(worker_port)
    server = prometheus(web_port, worker_port)

    def targets_up() -> bool:
        active = server.api("targets")["activeTargets"]
        return len(active) == 2 and all(t["health"] == "up" for t in active)

    with explained(services, worker):
        wait_for(targets_up, timeout=15, interval=0.2)
        jobs.invalid.enqueue("e2e")
        (alert,) = wait_for(lambda: server.firing("DjangoJobsDeadLetters"), timeout=20, interval=0.2)
        # honor_labels keeps our `job` label on the worker's series too.
        dead = wait_for(lambda: server.query('django_jobs_jobs_total{outcome="dead"} > 0'), interval=0.2)
    assert alert["job"] == "tests.invalid" and alert["severity"] == "page"
    assert [(labels["job"], count) for labels, count in dead] == [("tests.invalid", "1")]
    for port in (web_port, worker_port):
        promtool_check_metrics(scrape(f"http://127.0.0.1:{port}/metrics"))
    assert worker.proc.poll() is None, worker.output()
