"""``scripts/demo`` never shares a Redis database: a private redis-server by default, and a given
database only if it is empty or the demo's own. Its worker takes every job on "default" and "emails"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from example_project.demo_redis import MARKER, Refused, claim
from tests.acceptance.packaging import once_per_run
from tests.chaos import free_port
from tests.conftest import ROOT

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
    assert claim(redis_url).endswith("the demo's own")  # its own data from an earlier run
    redis_db.delete(MARKER)
    with pytest.raises(Refused):
        claim(redis_url)


def test_the_example_project_names_no_redis_of_its_own_accord():
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0 and "Set REDIS_URL" in result.stderr, result.stdout + result.stderr
