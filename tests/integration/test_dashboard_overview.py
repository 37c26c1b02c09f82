"""The queue overview: the numbers come from real Redis state and a real runjobs, reading costs a
bounded number of read-only Redis commands however many jobs wait, and it never runs RQ's registry
cleanup (which django-rq's dashboard triggers on every view)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import threading
import time

import pytest
import redis
from django.urls import reverse
from django.utils import timezone
from rq.registry import StartedJobRegistry

from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter
from django_jobs.store import Store, rq_timestamp
from django_jobs.telemetry import stats
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.integration.dashboard_support import operator, record
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

OVERVIEW = reverse("admin:django_jobs_overview")
READ_ONLY = {"LLEN", "LINDEX", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE", "SMEMBERS", "HGET", "HGETALL",
             "HMGET", "EXISTS"}  # fmt: skip
#: Running the read-only priority-heads script; MONITOR shows the commands it runs, in READ_ONLY too.
SCRIPT_CALLS = {"EVALSHA", "SCRIPT"}
CONNECTION_SETUP = {"CLIENT", "HELLO", "SELECT", "PING", "AUTH"}
STOP = "djjobs-monitor-stop"


class Monitor:
    """Every command Redis executes in the test database while the block runs (Redis MONITOR)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.db = client.connection_pool.connection_kwargs.get("db", 0)
        self.commands: list[str] = []

    def __enter__(self) -> Monitor:
        self.monitor = self.client.monitor().__enter__()  # MONITOR is acknowledged: from now on, all is seen
        self.thread = threading.Thread(target=self._listen)
        self.thread.start()
        return self

    def _listen(self) -> None:
        for seen in self.monitor.listen():
            if seen["db"] != self.db:
                continue  # other test runs use other databases
            if seen["command"] == f"ECHO {STOP}":
                return
            self.commands.append(seen["command"])

    def __exit__(self, *exc: object) -> None:
        self.client.echo(STOP)
        self.thread.join(10)
        self.monitor.__exit__(*exc)

    def names(self) -> list[str]:
        return [command.split()[0].upper() for command in self.commands]


def overview_of(client):
    response = client.get(OVERVIEW)
    assert response.status_code == 200
    return response.context["overview"]


def test_queue_numbers_come_from_redis(client, redis_db):
    jobs.always_fails.enqueue("r")
    run_jobs()  # failed once: waits in the scheduled set as a retry
    for key in ("q1", "q2", "q3"):
        jobs.record.enqueue(key)
    jobs.record.enqueue_in(600, "later")  # scheduled, but not a retry
    first = redis_db.lindex("rq:queue:default", 0).decode()
    two_minutes_ago = rq_timestamp(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=2))
    redis_db.hset(f"rq:job:{first}", "enqueued_at", two_minutes_ago)
    Store(get_connection("default")).complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n", finished_ttl=60
    )  # one job now runs: leased, in RQ's started registry
    operator(client, "view_queue_overview")
    queues = {q.name: q for q in overview_of(client).queues}
    default = queues["default"]
    assert (default.depth, default.running, default.scheduled, default.retrying) == (2, 1, 2, 1)
    assert default.oldest_age is not None and default.oldest_age < 60  # the oldest left is the second one
    assert not default.retrying_is_estimate
    assert (queues["emails"].depth, queues["emails"].oldest_age) == (0, None)
    redis_db.lpush("rq:queue:default", first)
    assert 115 < overview_of(client).queues[0].oldest_age < 200


def test_live_workers_and_what_each_runs(client, runjobs):
    jobs.slow.enqueue("busy", 30)
    process = runjobs("default", "--concurrency", "2")
    operator(client, "view_queue_overview")

    def busy():
        return [w for w in overview_of(client).workers if w.job_name == "tests.slow"]

    (worker,) = wait_for(busy, timeout=20)
    assert worker.state == "busy" and worker.queues == "default" and worker.pid.isdigit()
    assert worker.heartbeat_age is not None and worker.heartbeat_age < 10
    assert len(overview_of(client).workers) == 2
    assert "tests.slow" in client.get(OVERVIEW).content.decode()
    process.kill_tree()


def test_job_types_over_the_last_hour_and_day_with_a_chart(client, redis_db):
    connection = get_connection("default")
    now = dt.datetime.now(dt.UTC)
    for _ in range(3):
        stats.count(connection, "tests.record", "success")
    stats.count(connection, "tests.record", "retry")
    stats.count(connection, "tests.record", "snoozed")  # neither a success nor a failure, nor expired
    stats.count(connection, "tests.record", "snoozed")
    stats.count(connection, "tests.record", "expired")
    stats.count(connection, "tests.record", "dead", now=now - dt.timedelta(hours=3))
    stats.count(connection, "tests.record", "success", now=now - dt.timedelta(hours=30))  # too old
    old = record("tests.record", ["old"])
    DeadLetter.objects.filter(pk=old.pk).update(created_at=timezone.now() - dt.timedelta(hours=5))
    record("tests.record", ["new"])
    operator(client, "view_queue_overview")
    by_name = {j.name: j for j in overview_of(client).jobs}
    row = by_name["tests.record"]
    assert (row.stats.hour.successes, row.stats.hour.failures, row.dead_hour) == (3, 1, 1)
    assert (row.stats.day.successes, row.stats.day.failures, row.dead_day) == (3, 2, 2)
    assert (row.stats.hour.snoozed, row.stats.hour.expired, row.stats.day.snoozed) == (2, 1, 2)
    assert [(b.successes, b.failures) for b in row.stats.hourly[-4:]] == [(0, 1), (0, 0), (0, 0), (3, 1)]
    assert "tests.always_fails" in by_name  # every registered job has a row, even an idle one
    chart = str(row.chart)
    assert chart.startswith("<svg") and chart.count("<rect") == 48
    assert "this hour: 3 ok, 1 failed" in chart and "3 h ago: 0 ok, 1 failed" in chart
    body = client.get(OVERVIEW).content.decode()
    assert '<svg class="djjobs-chart"' in body and "http" not in chart  # inline, nothing fetched
    assert '<th class="num">snoozed</th><th class="num">expired</th>' in body


def snapshot(client: redis.Redis) -> dict[bytes, bytes]:
    """Every key of the test database with its serialized value."""
    return {key: client.dump(key) for key in client.scan_iter()}


def test_reading_changes_nothing_and_never_runs_rq_cleanup(client, redis_db, runjobs):
    jobs.slow.enqueue("busy", 30)
    process = runjobs("default")
    wait_for(lambda: redis_db.zcard("rq:wip:default"))
    # An entry RQ's own cleanup would fail and move to its failed registry: its score is in the past.
    redis_db.zadd("rq:wip:emails", {"ghost:1": time.time() - 3600})
    redis_db.hset("rq:job:ghost", mapping={"status": "started", "origin": "emails"})
    operator(client, "view_queue_overview")
    os.killpg(process.proc.pid, signal.SIGSTOP)  # nothing else writes while we look
    try:
        before = snapshot(redis_db)
        with Monitor(redis_db) as monitor:
            overview_of(client)
            client.get(reverse("admin:django_jobs_deadletter_changelist"))
        assert snapshot(redis_db) == before
    finally:
        os.killpg(process.proc.pid, signal.SIGCONT)
    assert monitor.commands, "MONITOR saw nothing"
    assert set(monitor.names()) <= READ_ONLY | SCRIPT_CALLS | CONNECTION_SETUP, monitor.commands
    # The trap is real: RQ's own count of its started registry runs the cleanup and moves the ghost.
    StartedJobRegistry("emails", connection=redis_db).get_job_ids()
    assert redis_db.zscore("rq:wip:emails", "ghost:1") is None
    process.kill_tree()


def test_reading_costs_the_same_commands_for_300_or_20000_waiting_jobs(client, redis_db):
    operator(client, "view_queue_overview")

    def fill(queued: int, scheduled: int) -> None:
        redis_db.flushdb()
        with redis_db.pipeline(transaction=False) as pipe:
            for i in range(queued):
                pipe.rpush("rq:queue:default", f"q{i}")
            for i in range(scheduled):
                pipe.zadd("rq:scheduled:emails", {f"s{i}": time.time() + 600})
                pipe.hset(f"rq:job:s{i}", "dj_attempt", i % 2)
            pipe.execute()

    def commands() -> int:
        with Monitor(redis_db) as monitor:
            overview_of(client)
        return len([name for name in monitor.names() if name not in CONNECTION_SETUP])

    fill(300, 300)
    small = commands()
    fill(10_000, 10_000)
    assert commands() == small
    emails = next(q for q in overview_of(client).queues if q.name == "emails")
    assert emails.scheduled == 10_000 and emails.retrying_is_estimate and emails.retrying == 100


def test_an_unreachable_redis_is_an_error_line_not_a_failed_page(client, private_redis):
    private_redis.stop()
    operator(client, "view_queue_overview")
    response = client.get(OVERVIEW)
    assert response.status_code == 200
    assert "did not answer" in response.content.decode()
    stats.count(get_connection("default"), "tests.record", "success")  # counting is best effort: no raise
