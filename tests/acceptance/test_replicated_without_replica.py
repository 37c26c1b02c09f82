"""A "replicated" queue whose Redis has no replica connected, served by a real ``runjobs``.

No push is ever confirmed, so every job keeps an outbox row. Each job still runs exactly once over a
window several times its hash's retention (``FINISHED_TTL``), also after Redis restarts without its
data; and the relay does not wait on ``WAIT`` for rows it already pushed to this server.
"""

from __future__ import annotations

import shutil
import time

import pytest
import redis
from django.db import transaction

from django_jobs.models import OutboxEntry
from tests.chaos import RedisServer
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

TTL = 2  # seconds a finished job's hash stays in Redis
TIMEOUT = 0.3  # REPLICA_TIMEOUT


def waits(client: redis.Redis) -> int:
    """The ``WAIT`` commands the server has answered since it started."""
    return int(client.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def lose_data(server: RedisServer) -> None:
    """Restart the server without its append-only file: a restart that lost everything."""
    server.stop()
    shutil.rmtree(server.directory / "appendonlydir", ignore_errors=True)
    server.start()


def test_each_job_runs_once_and_the_relay_never_waits_for_a_missing_replica(private_redis, runjobs, settings):
    settings.JOBS = {
        **settings.JOBS, "DEFAULT_DURABILITY": "replicated", "REPLICAS": 1, "REPLICA_TIMEOUT": TIMEOUT,
        "FINISHED_TTL": TTL,
    }  # fmt: skip
    client = redis.Redis.from_url(private_redis.url)
    keys = [f"r{n}" for n in range(10)]
    for key in keys[:5]:
        jobs.record.enqueue(key)  # outside a transaction: a row written after WAIT timed out
    with transaction.atomic():
        for key in keys[5:]:
            jobs.record.enqueue(key)  # inside one: the transaction's row stays
    assert OutboxEntry.objects.count() == 10  # no replica confirmed any of them
    enqueued = waits(client)
    worker = runjobs(
        "--concurrency", "2",
        extra_env={
            "JOBS_TEST_REDIS_URL": private_redis.url, "JOBS_TEST_DURABILITY": "replicated",
            "JOBS_TEST_FINISHED_TTL": str(TTL), "JOBS_TEST_REPLICA_TIMEOUT": str(TIMEOUT),
            "JOBS_TEST_BATCH_SWEEP": "0.5",
        },
    )  # fmt: skip
    wait_for(lambda: SideEffect.objects.filter(key__in=keys).count() >= 10, timeout=30)
    time.sleep(3 * TTL + 2)  # each finished hash has expired; the relay has passed many times
    assert waits(client) == enqueued, "the relay waited on WAIT with no replica connected"
    lose_data(private_redis)
    time.sleep(TTL + 2)
    ran = {key: SideEffect.objects.filter(key=key).count() for key in keys}
    assert ran == dict.fromkeys(keys, 1), worker.output()
    assert not OutboxEntry.objects.exists()  # a job that ran leaves nothing for the relay to push
    assert worker.proc.poll() is None
