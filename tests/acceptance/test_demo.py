"""``scripts/demo`` never shares a Redis database: a private redis-server by default, and a given
database only if it is empty or the demo's own. Its worker takes every job on "default" and "emails"."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from example_project.demo_redis import MARKER, Refused, claim
from tests.acceptance.packaging import once_per_run
from tests.chaos import free_port
from tests.conftest import ROOT, wait_for

pytestmark = [pytest.mark.acceptance, once_per_run]


def demo(tmp_path: Path, redis_url: str | None) -> subprocess.CompletedProcess[str]:
    """``scripts/demo --check`` with this interpreter, its own state directory and SQLite file."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(DEMO_PYTHON=sys.executable, DEMO_STATE=str(tmp_path / "state"), DEMO_PORT=str(free_port()),
               SHOP_DB_PATH=str(tmp_path / "shop.sqlite3"), DEMO_TIMEOUT="90")  # fmt: skip
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    return subprocess.run(
        ["scripts/demo", "--check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _waited(predicate: Callable[[], object], timeout: float) -> bool:
    """Whether ``predicate()`` came true within ``timeout`` (so the caller can say what it saw)."""
    try:
        wait_for(predicate, timeout=timeout)
    except AssertionError:
        return False
    return True


def test_without_redis_url_the_demo_runs_on_a_private_redis(tmp_path: Path):
    result = demo(tmp_path, None)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    where = re.search(r"The demo's jobs live in Redis database 0 at redis://127\.0\.0\.1:(\d+)/0", output)
    assert where and where[1] != "6379", output
    assert "Started a private" in output


@pytest.mark.unaudited("it plants another application's job id, with no hash, in the queue")
def test_the_demo_refuses_a_database_holding_another_applications_jobs(
    tmp_path: Path, redis_url: str, redis_db: redis.Redis
):
    redis_db.rpush("rq:queue:default", "someone-elses-job")
    result = demo(tmp_path, redis_url)
    assert result.returncode != 0
    assert "holds 1 key(s) that scripts/demo did not write" in result.stderr, result.stdout + result.stderr
    assert "Starting the worker" not in result.stdout
    assert redis_db.lrange("rq:queue:default", 0, -1) == [b"someone-elses-job"]


def test_a_database_is_claimed_when_empty_and_stays_the_demos(redis_url: str, redis_db: redis.Redis):
    assert claim(redis_url).endswith("the demo's own")
    redis_db.rpush("rq:queue:default", "a demo job")
    assert claim(redis_url).endswith("the demo's own")  # its own data from an earlier run...
    assert redis_db.keys() == [MARKER.encode()]  # ...emptied: a new run does not replay it
    redis_db.rpush("rq:queue:default", "a demo job")
    redis_db.delete(MARKER)
    with pytest.raises(Refused):
        claim(redis_url)


def test_the_example_project_names_no_redis_of_its_own_accord():
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "Set REDIS_URL" in result.stderr, result.stdout + result.stderr


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def started_by(tmp_path: Path) -> list[int]:
    """The processes whose environment names ``tmp_path``: what a demo run with its state there started."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if str(tmp_path).encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _orders(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT COUNT(*) FROM shop_order").fetchone()[0]


def test_ctrl_c_through_a_pipe_stops_everything_and_the_next_run_starts_fresh(tmp_path: Path):
    """``scripts/demo 2>&1 | tee demo.log``, then Ctrl-C: the terminal's SIGINT reaches tee too, so the
    cleanup writes to a closed pipe; it must still stop every service. The next run replays nothing."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    web = free_port()
    env.update(DEMO_PYTHON=sys.executable, DEMO_STATE=str(tmp_path / "state"), DEMO_PORT=str(web),
               SHOP_DB_PATH=str(tmp_path / "shop.sqlite3"))  # fmt: skip
    log = tmp_path / "demo.log"
    piped = subprocess.Popen(
        ["bash", "-c", f"scripts/demo 2>&1 | tee {log}"], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        started = _waited(lambda: log.exists() and "The shop is running" in log.read_text(), timeout=240)
        assert started, "the demo did not say it was running within 240 s; it printed:\n" + (
            log.read_text()[-3000:] if log.exists() else "(nothing)"
        )
    finally:
        os.killpg(piped.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        piped.wait(60)
    redis_port = int(re.search(r"redis://127\.0\.0\.1:(\d+)/0", log.read_text())[1])
    wait_for(lambda: port_free(web) and port_free(redis_port), timeout=30)  # runserver, redis-server
    wait_for(lambda: not started_by(tmp_path), timeout=30)  # runjobs and its work processes too
    first = _orders(tmp_path / "shop.sqlite3")
    assert demo(tmp_path, None).returncode == 0
    assert _orders(tmp_path / "shop.sqlite3") == first  # a fresh database: one run's orders, not two
