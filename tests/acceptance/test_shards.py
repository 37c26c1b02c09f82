"""One ``runjobs`` serving queues on two Redis servers while one of them is stopped (or frozen).

"default" lives on one private redis-server, "emails" on another; jobs are enqueued to both the whole
time. While the "emails" server is out, the "default" jobs keep running; once it is back, every job
of both has run exactly once, nothing is lost or dead-lettered, and neither server keeps a lease, a
lost or dying entry, a queued or scheduled job or a live concurrency slot. A job of the live server
that outlives a lease runs once: its lease kept being renewed while the other server was out.
``JOBS_CHAOS_OUTAGE_SECONDS`` sets how long the outage lasts (3 s by default; the issue asks for 30).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
from django.db import connection

from django_jobs.models import DeadLetter, OutboxEntry
from tests.chaos import RedisServer, converged, free_port
from tests.conftest import OUTAGE_SECONDS, wait_for
from tests.observability.conftest import scrape, value
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


class Feeder(threading.Thread):
    """Enqueues a short idempotent job to ``queue`` every ``interval`` seconds until stopped (outside
    any transaction: pushed at once, or kept in the outbox while the queue's Redis is out)."""

    def __init__(self, queue: str, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.queue, self.interval = queue, interval
        self.sent: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:
            while not self.halt.wait(self.interval):
                key = f"{self.queue}-{len(self.sent)}"
                jobs.soak.options(queue=self.queue).enqueue(key, 0.02)
                self.sent.append(key)
        finally:
            connection.close()

    def stop(self) -> list[str]:
        self.halt.set()
        self.join()
        return self.sent


def done(keys: list[str]) -> int:
    return SideEffect.objects.filter(key__in=keys).count()


def out(server: RedisServer, how: str) -> None:
    if how == "stopped":
        server.stop()
    else:
        server.freeze()


def back(server: RedisServer, how: str) -> None:
    if how == "stopped":
        server.start()
    else:
        server.thaw()


@pytest.mark.parametrize("how", ["stopped", "frozen"])
def test_a_server_that_is_out_costs_only_its_own_queues_and_loses_nothing(
    private_redis, emails_redis, runjobs, tmp_path, how
):
    env = {
        "JOBS_TEST_REDIS_URL": private_redis.url,
        "JOBS_TEST_QUEUE_URLS": json.dumps({"emails": emails_redis.url}),
        "TMPDIR": str(tmp_path),  # the metric files
    }
    port = free_port()
    worker = runjobs(
        "--concurrency", "2", "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", extra_env=env
    )
    url, up = f"http://127.0.0.1:{port}/metrics", {"server": emails_redis.url}
    feeders = {queue: Feeder(queue) for queue in ("default", "emails")}
    for feeder in feeders.values():
        feeder.start()
    wait_for(lambda: all(done(f.sent[:3]) == 3 for f in feeders.values()), timeout=30)  # both flow
    jobs.slow.enqueue("long", OUTAGE_SECONDS + 1)  # outlives a lease: its heartbeats must go on
    wait_for(lambda: done(["attempt:long"]))
    out(emails_redis, how)
    outage = time.monotonic()
    during = len(feeders["default"].sent)
    wait_for(lambda: len(feeders["default"].sent) >= during + 10)
    # The live server's jobs enqueued during the outage run while it lasts.
    wait_for(lambda: done(feeders["default"].sent[during : during + 10]) == 10, timeout=30)
    wait_for(lambda: value(scrape(url), "django_jobs_worker_redis_up", **up) == 0)
    time.sleep(max(OUTAGE_SECONDS - (time.monotonic() - outage), 0))
    back(emails_redis, how)
    time.sleep(1)  # jobs enqueued to both after the outage too
    sent = [key for feeder in feeders.values() for key in feeder.stop()]
    wait_for(lambda: done(sent) >= len(sent), timeout=90)
    ran = SideEffect.objects.filter(key__in=sent)
    assert ran.count() == ran.values("key").distinct().count() == len(sent)  # every job, each once
    assert not DeadLetter.objects.exists()
    wait_for(lambda: done(["long"]))
    assert done(["attempt:long"]) == 1  # the live server's lease was renewed all along: one attempt
    wait_for(lambda: not OutboxEntry.objects.exists())
    for server in (private_redis, emails_redis):
        client = redis.Redis.from_url(server.url)
        wait_for(lambda client=client: set(converged(client).values()) == {0}, timeout=30)
    assert value(scrape(url), "django_jobs_worker_redis_up", **up) == 1
    assert worker.proc.poll() is None, worker.output()
    log = worker.output()
    assert f"127.0.0.1:{emails_redis.port}/0 failed" in log and "answers again" in log
