"""``manage.py jobs_health``: exit 0 when jobs can flow, non-zero (with the reason) when they cannot."""

from __future__ import annotations

import datetime as dt
import io
import os
import socket
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections

from django_jobs.store import rq_timestamp
from django_jobs.testing import run_jobs
from tests.conftest import ROOT
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def health(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("jobs_health", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def worker(redis, name="host.1", queues="default,emails", hostname="elsewhere", foreign=False):
    """A live worker record: a runjobs work process's, or (``foreign``) an rqworker's, without the mark."""
    mark = {"version": "2.12.0"} if foreign else {"dj_runjobs": 1}  # what RQ's worker writes, or runjobs
    redis.hset(f"rq:worker:{name}", mapping={"state": "idle", "queues": queues, "hostname": hostname, **mark})
    redis.sadd("rq:workers", f"rq:worker:{name}")


def test_healthy_when_services_answer_every_queue_has_a_worker_and_nothing_waits_long(redis_db):
    worker(redis_db)
    jobs.record.enqueue("fresh")
    code, out = health()
    assert code == 0, out
    assert out.splitlines() == [
        "ok   database: default",
        "ok   database: other",
        "ok   redis: default, emails",
        "ok   foreign: no foreign worker",
        "ok   workers: default: 1 live",
        "ok   age: default: oldest job waited 0 s (limit 600)",
        "ok   workers: emails: 1 live",
        "ok   age: emails: oldest job waited 0 s (limit 600)",
        f"ok   eviction: Redis {settings.REDIS_URL}: maxmemory-policy noeviction, no maxmemory",
        "ok   quarantine: 0 unreadable, 0 vanished",
        "ok   deadletters: none open",
        "ok   durability: default: ledger, 1 ledger row(s) pending, oldest due 0 s ago",
        "ok   durability: emails: ledger, 0 ledger row(s) pending",
        "ok   replication: default, emails: master, no replica, primary last changed never",
        "ok   paused: nothing",
    ]


def test_open_dead_letters_are_a_warning_naming_the_jobs_and_the_way_out(redis_db):
    worker(redis_db)
    for key in ("a", "b", "c"):
        jobs.permanent.enqueue(key)
    jobs.invalid.enqueue("d")
    run_jobs()
    code, out = health()
    assert code == 0, out  # jobs still flow
    (line,) = [line for line in out.splitlines() if "deadletters" in line]
    assert line.startswith("WARN deadletters: 4 open (3 tests.permanent, 1 tests.invalid), the oldest since ")
    assert line.endswith("requeue or discard them in the dead-letter admin or with manage.py deadletters")
    assert "deadletters" not in health("--skip", "deadletters")[1]
    assert "ok   deadletters: none open" in health("emails")[1]  # only the queues asked about


def test_a_runjobs_of_an_older_release_without_the_mark_is_not_foreign(redis_db):
    redis_db.hset("rq:worker:old.1", mapping={"state": "idle", "queues": "default,emails", "hostname": "h"})
    redis_db.sadd("rq:workers", "rq:worker:old.1")
    code, out = health()
    assert code == 0 and "ok   foreign: no foreign worker" in out, out


def test_a_foreign_worker_on_a_queue_is_a_warning_and_serves_nothing(redis_db):
    worker(redis_db, queues="emails")
    worker(redis_db, name="c43f4e", queues="default", hostname="old-box", foreign=True)
    code, out = health()
    assert code == 1, out  # default has no runjobs: the rqworker does not count
    assert "FAIL workers: default: 0 live" in out
    assert (
        "WARN foreign: c43f4e on old-box (pid ?) serves default, not being runjobs: it fails the django_jobs "
        "jobs it takes (runjobs dead-letters them); stop it"
    ) in out.splitlines()
    assert "ok   foreign: no foreign worker" in health("emails")[1]


def test_a_queue_without_a_live_worker_is_unhealthy(redis_db):
    worker(redis_db, queues="emails")
    redis_db.sadd("rq:workers", "rq:worker:expired.1")  # a dead worker whose record expired
    code, out = health()
    assert code == 1
    assert "FAIL workers: default: 0 live" in out and "ok   workers: emails: 1 live" in out
    assert health("emails")[0] == 0
    assert health("--skip", "workers")[0] == 0


def test_local_counts_only_this_hosts_workers(redis_db):
    worker(redis_db, hostname="another-host")
    assert health("--local")[0] == 1
    worker(redis_db, name="here.1", hostname=socket.gethostname())
    assert health("--local")[0] == 0


def test_a_job_waiting_too_long_is_unhealthy(redis_db):
    worker(redis_db)
    handle = jobs.record.enqueue("stuck")
    stuck_since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=700)
    redis_db.hset(f"rq:job:{handle.id}", "enqueued_at", rq_timestamp(stuck_since))
    code, out = health()
    assert code == 1 and "FAIL age: default: oldest job waited 700 s (limit 600)" in out
    assert health("--max-age", "900")[0] == 0
    assert health("--skip", "age")[0] == 0


def test_an_unreachable_redis_is_unhealthy(redis_down):
    code, out = health()
    assert code == 1
    assert "FAIL redis: Error 111 connecting" in out


def test_a_redis_server_that_is_down_fails_only_its_own_queues(redis_db, emails_redis):
    worker(redis_db, queues="default")
    emails_redis.stop()
    code, out = health()
    assert code == 1
    assert "ok   redis: default" in out and "ok   workers: default: 1 live" in out
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert (
        len(failed) == 1 and failed[0].startswith("FAIL redis: Error 111") and "(queues emails)" in failed[0]
    )


def test_an_unknown_queue_is_an_error():
    with pytest.raises(CommandError, match="nowhere"):
        call_command("jobs_health", "nowhere")


@pytest.mark.parametrize("reachable", [True, False])
def test_as_a_probe_the_exit_code_says_whether_the_database_answers(reachable, tmp_path):
    name = str(connections["default"].settings_dict["NAME"])
    if not reachable:  # a file in a missing directory, or a PostgreSQL database that does not exist
        name = (
            str(tmp_path / "missing" / "db.sqlite3")
            if connections["default"].vendor == "sqlite"
            else "nowhere"
        )
    probe = subprocess.run(
        [sys.executable, "-m", "django", "jobs_health", "--skip", "workers", "--settings", "tests.settings"],
        cwd=ROOT,
        env={**os.environ, "JOBS_TEST_DB_NAME": name},
        capture_output=True,
        timeout=60,
    )
    output = (probe.stdout + probe.stderr).decode()
    if reachable:
        assert probe.returncode == 0, output
    else:
        assert probe.returncode == 1, output
        assert "FAIL database: default:" in output and "unhealthy: database: default" in output


def test_a_paused_queue_or_job_type_is_a_warning_and_its_waiting_jobs_are_no_failure(redis_db):
    from django_jobs import pause

    worker(redis_db)
    jobs.record.options(queue="emails").enqueue("waits")
    redis_db.hset(
        f"rq:job:{redis_db.lindex('rq:queue:emails', 0).decode()}",
        "enqueued_at",
        rq_timestamp(dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)),
    )
    assert health("--skip", "database")[0] == 1  # two hours old on a running queue: unhealthy
    pause(queue="emails", reason="provider down")
    pause(job=jobs.greet)
    code, out = health("--skip", "database")
    assert code == 0, out
    (age,) = [line for line in out.splitlines() if "age: emails" in line]
    assert age.startswith("ok   age: emails: oldest job waited 720") and age.endswith("(limit 600), paused")
    paused = [line for line in out.splitlines() if "paused:" in line]
    assert [line.split(" s ago ")[0].rsplit(" ", 1)[0] for line in paused] == [
        "WARN paused: job tests.greet: paused",
        "WARN paused: queue emails: paused",
    ]
    assert paused[1].endswith(": provider down")
