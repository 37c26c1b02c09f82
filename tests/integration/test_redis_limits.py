"""Redis's limits as the system check, jobs_health and the gauges report them, and the duty that
dead-letters jobs whose hash vanished."""

from __future__ import annotations

import io
import logging

import pytest
import redis
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from prometheus_client import CollectorRegistry, generate_latest

from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter
from django_jobs.ops import collectors
from django_jobs.store import Store
from django_jobs.telemetry import metrics
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.conftest import wait_for
from tests.observability.conftest import samples
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def health() -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("jobs_health", "--skip", "workers", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def eviction_messages():
    return [m for m in run_checks() if m.id in ("django_jobs.W010", "django_jobs.W011")]


def test_an_evicting_redis_is_a_warning_in_the_checks_and_in_jobs_health(private_redis):
    client = redis.Redis.from_url(private_redis.url)
    assert eviction_messages() == []
    client.config_set("maxmemory-policy", "allkeys-lru")
    assert eviction_messages() == []  # no maxmemory: Redis never evicts
    client.config_set("maxmemory", "100mb")
    (message,) = eviction_messages()
    assert message.id == "django_jobs.W010"
    assert f"Redis redis://127.0.0.1:{private_redis.port}/0 evicts keys" in message.msg
    assert "allkeys-lru" in message.msg and "noeviction" in message.hint
    code, out = health()
    assert code == 0, out  # a warning, not a failed probe
    assert f"WARN eviction: Redis redis://127.0.0.1:{private_redis.port}/0 evicts keys when full" in out
    client.config_set("maxmemory-policy", "noeviction")
    assert eviction_messages() == []
    assert "ok   eviction:" in health()[1]


def test_a_redis_that_forbids_config_is_reported_as_unknown_not_as_a_crash(private_redis, settings):
    admin = redis.Redis.from_url(private_redis.url)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">secret", "~*", "&*", "+@all", "-config")
    url = private_redis.url.replace("redis://", "redis://app:secret@")
    settings.RQ_QUEUES = {name: {**config, "URL": url} for name, config in settings.RQ_QUEUES.items()}
    (message,) = eviction_messages()
    assert message.id == "django_jobs.W011"
    assert "Could not read the maxmemory-policy" in message.msg
    code, out = health()
    assert code == 0 and "WARN eviction: Could not read the maxmemory-policy" in out, out


def test_an_unreachable_redis_is_left_to_jobs_health_not_the_checks(private_redis):
    private_redis.stop()
    assert eviction_messages() == []


def dead_letter(job_id, reason, status=DeadLetter.Status.OPEN):
    DeadLetter.objects.create(job_id=job_id, job_name="(unknown)", queue="default", exception="JobVanished",
                              attempts=0, reason=reason, status=status)  # fmt: skip


def scrape():
    registry = CollectorRegistry()
    collectors.register(registry)
    return samples(generate_latest(registry).decode())


def quarantined(scraped, reason):
    return scraped.get(("django_jobs_quarantined_items", frozenset({("reason", reason)})))


def test_open_quarantined_and_vanished_items_are_a_gauge_and_a_jobs_health_warning():
    assert (quarantined(scrape(), "unreadable"), quarantined(scrape(), "vanished")) == (0, 0)
    assert "ok   quarantine: 0 unreadable, 0 vanished" in health()[1]
    dead_letter("a", DeadLetter.Reason.UNREADABLE)
    dead_letter("b", DeadLetter.Reason.VANISHED)
    dead_letter("c", DeadLetter.Reason.VANISHED)
    dead_letter("d", DeadLetter.Reason.VANISHED, DeadLetter.Status.DISCARDED)  # dealt with
    dead_letter("e", DeadLetter.Reason.PERMANENT)  # a failed job, not a quarantined item
    scraped = scrape()
    assert (quarantined(scraped, "unreadable"), quarantined(scraped, "vanished")) == (1, 2)
    code, out = health()
    assert code == 0 and "WARN quarantine: 1 unreadable, 2 vanished" in out, out


def test_the_claim_sets_a_vanished_id_aside_and_one_duty_dead_letters_it_once(redis_db, caplog):
    gone = jobs.record.enqueue("gone")
    jobs.record.enqueue("kept")
    redis_db.delete(f"rq:job:{gone.id}")
    assert run_jobs() == 1
    assert SideEffect.objects.filter(key="kept").count() == 1
    store = Store.of(get_connection("default"))
    before = metrics.VANISHED.labels("default")._value.get()
    with caplog.at_level(logging.WARNING, logger="django_jobs.worker"):
        for _ in range(2):  # two runjobs, or one duty run twice
            Maintenance(store, ["default"], 0.1).vanished.run()
    entry = DeadLetter.objects.get()
    assert (entry.job_id, entry.reason, entry.queue, entry.attempts) == (gone.id, "vanished", "default", 0)
    assert "evicted" in entry.message
    assert metrics.VANISHED.labels("default")._value.get() == before + 1
    assert [r.getMessage() for r in caplog.records if "vanished" in r.getMessage()] == [
        f"Job {gone.id} vanished from queue default: {entry.message} Recorded as a dead letter."
    ]
    assert not redis_db.exists("djjobs:vanished")


def test_a_malformed_queue_url_does_not_crash_the_checks(settings):
    settings.RQ_QUEUES = {"default": {"URL": "not a url", "SERIALIZER": "rq.serializers.JSONSerializer"}}
    assert eviction_messages() == []


def test_heartbeats_from_their_own_thread_keep_a_healthy_attempt_alive_until_they_stop(redis_db):
    """No supervisor loop runs here: the heartbeat thread alone renews, the guard alone kills."""
    import subprocess
    import time

    from django_jobs.worker.guard import ClaimBoard, Heartbeat, LeaseGuard

    lease = 1.5
    store = Store.of(get_connection("default"))
    jobs.record.enqueue("held")
    claimed_ns = time.monotonic_ns()
    _, claimed, _ = store.complete_and_claim(["default"], finished=None, worker_name="w", lease_seconds=lease,
                                             nonce="n", finished_ttl=60)  # fmt: skip
    guard, process, board = LeaseGuard(lease), subprocess.Popen(["sleep", "60"]), ClaimBoard()
    heartbeat = Heartbeat(store, guard, lease)
    try:
        guard.add(process.pid, board)
        board.post(claimed_ns)
        heartbeat.publish([(process.pid, claimed.token, claimed_ns)])
        guard.start()
        heartbeat.start()
        time.sleep(3 * lease)  # well past 80% of the lease since the claim
        assert process.poll() is None
        assert redis_db.zscore("djjobs:leases", claimed.token) is not None
        beats = heartbeat.gone()
        assert beats and not any(beats)  # beats ran, and each found the lease
        heartbeat.stop(wait=True)  # as when Redis stops answering
        stopped = time.monotonic()
        wait_for(lambda: process.poll() is not None, timeout=5, interval=0.01)
        seconds, micros = redis_db.time()
        assert seconds + micros / 1e6 < redis_db.zscore("djjobs:leases", claimed.token)  # not expired yet
        assert time.monotonic() - stopped < lease
    finally:
        heartbeat.stop()
        guard.stop()
        process.kill()
        process.wait()


def test_a_vanished_id_that_failed_waits_behind_the_others_instead_of_heading_every_scan(redis_db):
    store = Store(redis_db)
    redis_db.zadd("djjobs:vanished", {b"default\nfirst": 1, b"default\nsecond": 2})
    store.defer("djjobs:vanished", b"default\nfirst", 60)  # as a failed recording does
    assert [item.id for item in store.vanished()] == ["second"]  # not retried until it is due again
