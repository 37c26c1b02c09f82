"""The web side's gauges: read from real Redis and the database at scrape time, at a cost that does
not grow with the number of queued jobs."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest

from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.ops import collectors
from django_jobs.store import rq_timestamp
from django_jobs.testing import run_jobs
from tests.observability.conftest import samples
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    collectors.register(registry)
    return samples(generate_latest(registry).decode())


def gauge(scraped, name, **labels):
    return scraped.get((name, frozenset(labels.items())))


def worker(redis, name, state, queues="default,emails", hostname="host-a"):
    record = {"state": state, "queues": queues, "hostname": hostname, "dj_runjobs": 1}  # a runjobs process
    redis.hset(f"rq:worker:{name}", mapping=record)
    redis.sadd("rq:workers", f"rq:worker:{name}")


def dead_letter(job_name, status=DeadLetter.Status.OPEN):
    return DeadLetter.objects.create(
        job_id=f"{job_name}-{DeadLetter.objects.count()}",
        job_name=job_name,
        queue="default",
        exception="builtins.ValueError",
        attempts=1,
        reason=DeadLetter.Reason.PERMANENT,
        status=status,
    )


def test_queue_gauges_read_depth_head_age_and_scheduled_jobs(redis_db):
    old = jobs.record.enqueue("first")
    jobs.record.enqueue("second")
    jobs.record.enqueue_in(600, "later")
    two_minutes_ago = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=120)
    redis_db.hset(f"rq:job:{old.id}", "enqueued_at", rq_timestamp(two_minutes_ago))
    scraped = scrape()
    assert gauge(scraped, "django_jobs_queue_depth", queue="default") == 2
    assert 120 <= gauge(scraped, "django_jobs_queue_oldest_job_age_seconds", queue="default") < 130
    assert gauge(scraped, "django_jobs_scheduled_jobs", queue="default") == 1
    # Every configured queue is reported, empty ones at zero.
    assert gauge(scraped, "django_jobs_queue_depth", queue="emails") == 0
    assert gauge(scraped, "django_jobs_queue_oldest_job_age_seconds", queue="emails") == 0
    assert gauge(scraped, "django_jobs_scheduled_jobs", queue="emails") == 0


def test_a_poison_entry_at_the_head_leaves_the_age_out_but_not_the_depth(redis_db):
    redis_db.set("rq:job:poison", "not a hash")
    redis_db.rpush("rq:queue:default", "poison")
    scraped = scrape()
    assert gauge(scraped, "django_jobs_queue_depth", queue="default") == 1
    assert gauge(scraped, "django_jobs_queue_oldest_job_age_seconds", queue="default") is None


def test_live_workers_are_counted_by_state_and_expired_records_are_not(redis_db):
    worker(redis_db, "host-a.1", "busy")
    worker(redis_db, "host-a.2", "idle")
    worker(redis_db, "host-b.1", "idle")
    redis_db.sadd("rq:workers", "rq:worker:expired.1")  # its hash expired with its heartbeat
    scraped = scrape()
    assert gauge(scraped, "django_jobs_workers", state="busy") == 1
    assert gauge(scraped, "django_jobs_workers", state="idle") == 2
    redis_db.delete("rq:workers")
    scraped = scrape()
    assert gauge(scraped, "django_jobs_workers", state="busy") == 0
    assert gauge(scraped, "django_jobs_workers", state="idle") == 0


def test_a_work_process_serving_two_servers_is_one_worker_busy_if_either_says_so(redis_db, emails_redis):
    other = redis.Redis.from_url(emails_redis.url)
    worker(redis_db, "host-a.1", "busy", queues="default")  # runjobs registers it on both servers
    worker(other, "host-a.1", "idle", queues="emails")
    worker(other, "host-a.2", "idle", queues="emails")
    scraped = scrape()
    assert gauge(scraped, "django_jobs_workers", state="busy") == 1
    assert gauge(scraped, "django_jobs_workers", state="idle") == 1


def test_a_redis_server_that_is_down_leaves_out_only_its_own_queues(redis_db, emails_redis, caplog):
    jobs.record.enqueue("waiting")
    emails_redis.stop()
    with caplog.at_level(logging.WARNING, logger="django_jobs.metrics"):
        scraped = scrape()
    assert gauge(scraped, "django_jobs_queue_depth", queue="default") == 1
    assert gauge(scraped, "django_jobs_redis_replicas", queue="default") == 0
    assert gauge(scraped, "django_jobs_queue_depth", queue="emails") is None
    assert gauge(scraped, "django_jobs_redis_replicas", queue="emails") is None
    assert not [key for key in scraped if key[0] == "django_jobs_workers"]  # a partial count would mislead
    assert "Gauges of queue(s) emails left out of this scrape" in caplog.text


@pytest.mark.usefixtures("fast")
def test_dead_letter_and_outbox_gauges():
    for _ in range(3):
        dead_letter("tests.invalid")
    dead_letter("tests.invalid", DeadLetter.Status.DISCARDED)
    dead_letter("tests.permanent", DeadLetter.Status.REQUEUED)
    with transaction.atomic():  # the on-commit push delivers it; the row waits for the relay to prune it
        jobs.record.enqueue("outboxed")
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(seconds=30))
    scraped = scrape()
    assert gauge(scraped, "django_jobs_dead_letters", job="tests.invalid", status="open") == 3
    assert gauge(scraped, "django_jobs_dead_letters", job="tests.invalid", status="discarded") == 1
    assert gauge(scraped, "django_jobs_dead_letters", job="tests.permanent", status="requeued") == 1
    assert gauge(scraped, "django_jobs_outbox_pending") == 1
    assert 30 <= gauge(scraped, "django_jobs_outbox_oldest_age_seconds") < 40
    OutboxEntry.objects.all().delete()
    scraped = scrape()
    assert gauge(scraped, "django_jobs_outbox_pending") == 0
    assert gauge(scraped, "django_jobs_outbox_oldest_age_seconds") == 0


def test_the_cost_does_not_grow_with_queued_jobs_or_dead_letters(private_redis):
    server = redis.Redis.from_url(private_redis.url)

    def cost() -> tuple[dict[str, int], int]:
        """Redis commands run (inside the script too) and SQL queries, for one scrape."""
        before = server.info("commandstats")
        with CaptureQueriesContext(connection) as queries:
            scrape()
        after = server.info("commandstats")
        calls = {name: after[name]["calls"] - before.get(name, {"calls": 0})["calls"] for name in after}
        return {name: n for name, n in calls.items() if n and name != "cmdstat_info"}, len(queries)

    jobs.record.enqueue("head")
    for priority in (5, -5):  # a priority in the high set, one in the low set
        jobs.record.options(priority=priority).enqueue(f"head{priority}")
    dead_letter("tests.invalid")
    cost()  # opens the connection
    small = cost()
    jobs.record.enqueue_many([(f"k{i}",) for i in range(500)])
    for i in range(500):
        jobs.record.options(priority=5 if i % 2 else -5).enqueue(f"p{i}")
    for _ in range(20):
        dead_letter("tests.invalid")
    assert cost() == small
    # A constant handful of read-only commands per queue and worker (the read model the overview uses too),
    # plus the read-only scripts that find the head of each priority in use and count the parked jobs
    # (a ZRANGE of each queue's index of parked lines, empty here).
    read_only = {"llen", "lindex", "zcard", "zrange", "zrangebyscore", "smembers", "hget", "hmget", "hgetall"}
    script = {"evalsha", "script|exists"}
    assert set(small[0]) <= {f"cmdstat_{name}" for name in read_only | script}, small[0]
    queues = len(settings.RQ_QUEUES)  # no worker runs: a few commands per queue, and per server
    priorities = 2  # each costs a ZCARD and a ZRANGEBYSCORE in the script and an HGET of its head
    # workers, leases, the parked lines' script...; and what is paused (the paused hash, the parked lists)
    per_server = 6 + 2
    assert sum(small[0].values()) <= 8 * queues + per_server + 3 * priorities, small[0]
    assert small[1] == 5  # one aggregate each: dead letters, outbox, overdue cron runs, open batches, ledger


def test_an_unreachable_redis_leaves_its_gauges_out_and_keeps_the_rest(redis_down, caplog):
    dead_letter("tests.invalid")
    with caplog.at_level(logging.WARNING, logger="django_jobs.metrics"):
        scraped = scrape()
    assert gauge(scraped, "django_jobs_dead_letters", job="tests.invalid", status="open") == 1
    assert not [key for key in scraped if key[0] in ("django_jobs_queue_depth", "django_jobs_workers")]
    assert "Redis did not answer" in caplog.text


def test_registering_twice_is_harmless_and_touches_no_service(redis_down):
    registry = CollectorRegistry(auto_describe=True)
    with CaptureQueriesContext(connection) as queries:
        collectors.register(registry)
        collectors.register(registry)
    assert not queries


def test_the_multi_process_view_serves_the_gauges_too(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    dead_letter("tests.invalid")
    response = collectors.metrics_view(RequestFactory().get("/metrics"))
    assert response.status_code == 200
    scraped = samples(response.content.decode())
    assert gauge(scraped, "django_jobs_dead_letters", job="tests.invalid", status="open") == 1
    assert gauge(scraped, "django_jobs_queue_depth", queue="default") == 0


def test_cron_periods_past_their_deadline_unfinished_are_counted_per_job():
    from django_jobs.models import CronRun

    now = timezone.now()
    CronRun.objects.create(name="tests.tick", scheduled_for=now - dt.timedelta(hours=2),
                           deadline=now - dt.timedelta(hours=1))  # fmt: skip
    CronRun.objects.create(name="tests.tick", scheduled_for=now - dt.timedelta(hours=1), deadline=now,
                           finished_at=now)  # fmt: skip
    CronRun.objects.create(name="tests.hourly", scheduled_for=now, deadline=now + dt.timedelta(hours=1))
    scraped = scrape()
    assert gauge(scraped, "django_jobs_cron_overdue", job="tests.tick") == 1
    assert gauge(scraped, "django_jobs_cron_overdue", job="tests.hourly") is None


def test_pause_gauges_count_seconds_since_each_pause_and_zero_for_running_queues(redis_db):
    from django_jobs import pause

    ninety_seconds_ago = json.dumps({"at": time.time() - 90, "by": "ops", "reason": ""})
    redis_db.hset("djjobs:paused", "queue:emails", ninety_seconds_ago)  # as a pause 90 s ago wrote it
    pause(job=jobs.record)
    jobs.record.enqueue("parked")
    run_jobs()
    scraped = scrape()
    assert 90 <= gauge(scraped, "django_jobs_queue_paused_seconds", queue="emails") < 100
    assert gauge(scraped, "django_jobs_queue_paused_seconds", queue="default") == 0
    assert 0 <= gauge(scraped, "django_jobs_job_paused_seconds", job="tests.record") < 10
    assert gauge(scraped, "django_jobs_job_paused_seconds", job="tests.greet") is None  # only paused types
    assert gauge(scraped, "django_jobs_queue_depth", queue="default") == 0  # a parked job is not ready


def test_open_batches_are_counted():
    from django_jobs.workflows.batches import batch

    with batch(name="waits"):
        jobs.record.enqueue("member")
    with batch(name="empty, so fired at once"):
        pass
    assert gauge(scrape(), "django_jobs_batches_open") == 1
