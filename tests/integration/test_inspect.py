"""The read model: the overview, the /metrics gauges and jobs_health see the same state, read once,
and a poison key in Redis reads as missing instead of hiding a whole server."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from prometheus_client import CollectorRegistry, generate_latest

from django_jobs.ops import collectors, overview
from django_jobs.ops import inspection as inspect
from django_jobs.store import rq_timestamp
from tests.observability.conftest import samples
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

TEN_MINUTES_AGO = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)


def worker(redis, name: str, state: str, current_job: str = "") -> None:
    record = {
        "state": state,
        "queues": "default",
        "hostname": "host-a",
        "pid": "7",
        "current_job": current_job,
        "dj_runjobs": 1,
    }
    redis.hset(f"rq:worker:{name}", mapping=record)
    redis.sadd("rq:workers", f"rq:worker:{name}")


def gauges() -> dict:
    registry = CollectorRegistry()
    collectors.register(registry)
    return samples(generate_latest(registry).decode())


def health() -> str:
    out = io.StringIO()
    call_command("jobs_health", "default", "--skip", "database", "--max-age", "3600", stdout=out)
    return out.getvalue()


def test_every_presenter_shows_the_state_the_read_model_reads(redis_db):
    old = jobs.record.enqueue("old")
    jobs.record.enqueue("new")
    redis_db.hset(f"rq:job:{old.id}", "enqueued_at", rq_timestamp(TEN_MINUTES_AGO))
    redis_db.zadd("rq:scheduled:default", {"later": 9e9})
    worker(redis_db, "host-a.1", "idle")
    (server,) = inspect.servers(["default"])
    (queue,) = server.queues
    assert (queue.depth, queue.scheduled) == (2, 1) and 590 < (queue.oldest_age or 0) < 1200
    assert [(w.name, w.state) for w in server.workers] == [("host-a.1", "idle")]

    shown = next(q for q in overview.snapshot().queues if q.name == "default")
    assert (shown.depth, shown.scheduled, shown.oldest_age is not None) == (2, 1, True)
    scraped = gauges()
    assert scraped[("django_jobs_queue_depth", frozenset({("queue", "default")}))] == 2
    assert scraped[("django_jobs_scheduled_jobs", frozenset({("queue", "default")}))] == 1
    assert scraped[("django_jobs_workers", frozenset({("state", "idle")}))] == 1
    assert "default: 1 live" in health()


def test_poison_keys_read_as_missing_and_the_overview_still_shows_the_server(redis_db):
    redis_db.set("rq:job:poison", "not a hash")
    redis_db.rpush("rq:queue:default", "poison")  # a queue head whose job key is not a hash
    redis_db.zadd("rq:scheduled:default", {"poison": 9e9})  # sampled for retries
    redis_db.set("rq:worker:broken", "not a hash")
    redis_db.sadd("rq:workers", "rq:worker:broken")  # a worker record that is not a hash
    worker(redis_db, "host-a.1", "busy", current_job="poison")  # running a job whose key is not a hash

    seen = overview.snapshot()
    assert seen.errors == []
    queue = next(q for q in seen.queues if q.name == "default")
    assert (queue.depth, queue.oldest_age, queue.scheduled, queue.retrying) == (1, None, 1, 0)
    assert [(w.name, w.state, w.job_id) for w in seen.workers] == [("host-a.1", "idle", "")]
    assert scraped_depth() == 1


def scraped_depth() -> float:
    return gauges()[("django_jobs_queue_depth", frozenset({("queue", "default")}))]
