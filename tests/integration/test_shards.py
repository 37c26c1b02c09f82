"""Queues on two Redis servers: "default" on the test Redis, "emails" on a private one (``emails_redis``).

Each server keeps its own store, maintenance and outcome counts; a server that is down holds back only
its own queues, whether a work process claims, waits, enqueues or relays.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
import redis
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import override_settings

from django_jobs.core import execution
from django_jobs.core.connections import queues_on
from django_jobs.core.outcomes import Outcome
from django_jobs.models import CronRun, DeadLetter, OutboxEntry
from django_jobs.store import LEASES, Finished, Store, wake_key
from django_jobs.telemetry import stats
from django_jobs.testing import run_jobs
from django_jobs.worker import SHARDED_SOCKET_TIMEOUT, WORKER_SOCKET_TIMEOUT, build_supervisor
from django_jobs.worker.maintenance import Maintenance
from django_jobs.worker.process import DRAINED_PAUSE, Served, WorkProcess
from django_jobs.worker.servers import wait_any
from tests.chaos import RedisServer
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def client(server: RedisServer) -> redis.Redis:
    return redis.Redis.from_url(server.url)


def queued(connection: redis.Redis, queue: str) -> list[bytes]:
    return connection.lrange(f"rq:queue:{queue}", 0, -1)


def served(queues: list[str]) -> list[Served]:
    """A work process's view of the servers of ``queues``, as runjobs builds it."""
    return [Served.of(s) for s in build_supervisor(queues).servers]


def claim(one: list[Served]) -> tuple[Served, object] | None:
    process = WorkProcess([s.reach.server for s in one], "host.1", report_fd=-1)
    return process._claim(one, False, "n")


def test_runjobs_serves_queues_on_two_servers_grouped_in_the_order_given(redis_db, emails_redis):
    supervisor = build_supervisor(["emails", "default"])
    assert [server.queues for server in supervisor.servers] == [("emails",), ("default",)]
    assert [shard.maintenance.lead for shard in supervisor.shards] == [True, False]
    ports = [s.connection.connection_pool.connection_kwargs["port"] for s in supervisor.servers]
    assert ports[0] == emails_redis.port and ports[1] == redis_db.connection_pool.connection_kwargs["port"]
    for server in supervisor.servers:  # a frozen server holds a claim up for a bounded time only
        assert server.connection.connection_pool.connection_kwargs["socket_timeout"] == SHARDED_SOCKET_TIMEOUT
    (alone,) = build_supervisor(["default"]).servers
    assert alone.connection.connection_pool.connection_kwargs["socket_timeout"] == WORKER_SOCKET_TIMEOUT
    assert queues_on("emails") == ["emails"] and queues_on("default") == ["default"]


def test_a_claim_asks_each_server_in_turn_and_completes_each_jobs_success_on_its_own(redis_db, emails_redis):
    b = client(emails_redis)
    first = jobs.record.options(queue="emails").enqueue("b1")
    one = served(["default", "emails"])
    (where, claimed) = claim(one)  # nothing on default: the second server's job
    assert where is one[1] and claimed.id == first.id
    assert execution.run(where.store, claimed).outcome is Outcome.SUCCESS
    where.finished = [Finished(claimed.token, claimed.queue)]  # what the next claim completes
    later = jobs.record.enqueue("a1")
    (where, claimed) = claim(one)  # the first server's job, and the second's completion alongside
    assert where is one[0] and claimed.id == later.id
    assert b.hget(f"rq:job:{first.id}", "status") == b"finished" and not b.zcard(LEASES)
    assert one[1].finished == []


def test_a_drained_server_costs_a_busy_process_one_empty_claim_per_pause_not_one_per_job(
    redis_db, emails_redis
):
    b = client(emails_redis)
    handles = [jobs.record.enqueue(f"a{i}") for i in range(150)]
    one = served(["emails", "default"])  # the drained server first: asked before the busy one
    before = b.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    started = time.monotonic()
    ran = []
    for _ in handles:
        where, claimed = claim(one)
        assert where is one[1]
        ran.append(claimed.id)
        where.finished = [Finished(claimed.token, claimed.queue)]
    elapsed = time.monotonic() - started
    empty = b.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0) - before
    assert ran == [h.id for h in handles]
    assert 1 <= empty <= elapsed / DRAINED_PAUSE + 2 and empty < len(handles)
    late = jobs.record.options(queue="emails").enqueue("b")  # nothing left elsewhere: asked again at once
    got = wait_for(lambda: claim(one), timeout=5)
    assert got[0] is one[0] and got[1].id == late.id


def test_a_server_that_is_down_is_skipped_and_probed_until_it_answers(redis_db, emails_redis):
    jobs.record.options(queue="emails").enqueue("b")
    handle = jobs.record.enqueue("a")
    one = served(["emails", "default"])
    emails_redis.stop()
    where, claimed = claim(one)  # the first server failed: the second's job all the same
    assert where is one[1] and claimed.id == handle.id
    assert one[0].reach.down
    assert claim(one) is None  # not asked again before its probe is due
    emails_redis.start()
    got = wait_for(lambda: claim(one))  # the probe finds it back, and its job (kept on disk) is claimed
    assert got[0] is one[0] and not one[0].reach.down


def test_an_idle_wait_on_two_servers_wakes_for_either_and_takes_no_token_once_awake(redis_db, emails_redis):
    b = client(emails_redis)
    one = served(["default", "emails"])
    waiting = threading.Thread(target=wait_any, args=([s.reach for s in one],))
    waiting.start()
    wait_for(lambda: b.client_list() and any(c["cmd"] == "blpop" for c in b.client_list()))
    b.rpush(wake_key("emails"), 1)
    waiting.join()
    assert b.llen(wake_key("emails")) == 0  # the second server's BLPOP took it
    # Awake (running a job, say), the process holds no BLPOP on the first server any more: a token
    # pushed there now is left for an idle process.
    db = str(redis_db.connection_pool.connection_kwargs["db"])  # the server is shared with other runs
    wait_for(lambda: not any(c["cmd"] == "blpop" and c["db"] == db for c in redis_db.client_list()))
    redis_db.rpush(wake_key("default"), 1)
    assert redis_db.llen(wake_key("default")) == 1


def test_an_idle_wait_sets_a_frozen_server_aside(redis_db, emails_redis):
    one = served(["default", "emails"])
    emails_redis.freeze()
    try:
        wait_any([s.reach for s in one])  # the first server's BLPOP times out; the frozen one never answers
        assert one[1].reach.down and not one[0].reach.down
    finally:
        emails_redis.thaw()


def test_run_jobs_runs_each_servers_queues_and_counts_each_outcome_on_its_server(redis_db, emails_redis):
    stats.forget()  # outcomes other tests left unwritten
    b = client(emails_redis)
    jobs.record.enqueue("a")
    jobs.record.options(queue="emails").enqueue("b1")
    jobs.record.options(queue="emails").enqueue("b2")
    assert run_jobs() == 3
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["a", "b1", "b2"]
    now = dt.datetime.now(dt.UTC)
    for connection, successes in ((redis_db, 1), (b, 2)):
        counted: dict[str, stats.JobStats] = {}
        stats.read(connection, now, counted)
        assert counted["tests.record"].hour.successes == successes


@pytest.mark.usefixtures("fast")
def test_an_enqueue_while_one_server_is_down_pushes_to_the_other_and_keeps_the_rest_in_the_outbox(
    redis_db, emails_redis
):
    emails_redis.stop()
    jobs.record.enqueue_many([("a",)])
    jobs.record.options(queue="emails").enqueue("b")
    with transaction.atomic():
        jobs.record.enqueue("a2")
        jobs.record.options(queue="emails").enqueue("b2")
    assert len(queued(redis_db, "default")) == 2  # pushed at once, commit included
    assert sorted(OutboxEntry.objects.values_list("queue", flat=True)) == ["default", "emails", "emails"]
    # (the "default" row is the committed transaction's, pruned by the relay once its push is seen)


@pytest.mark.usefixtures("fast")
def test_each_servers_relay_pushes_only_its_rows_and_a_down_server_holds_back_only_its_own(
    redis_db, emails_redis
):
    b = client(emails_redis)
    emails_redis.stop()
    jobs.record.options(queue="emails").enqueue("b")  # to the outbox: its server is down
    with transaction.atomic():
        jobs.record.enqueue("a")
    OutboxEntry.objects.update(created_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))  # due for the relay
    first = Maintenance(Store(redis_db), ["default"], 0.1)
    second = Maintenance(Store(b), ["emails"], 0.1, lead=False)
    first.relay.run()
    assert list(OutboxEntry.objects.values_list("queue", flat=True)) == ["emails"]  # not the first's to push
    second.relay.run()  # its Redis is down: the row waits
    assert list(OutboxEntry.objects.values_list("queue", flat=True)) == ["emails"]
    emails_redis.start()
    second.relay.paused.clear()
    second.relay.run()
    assert len(queued(b, "emails")) == 1 and not OutboxEntry.objects.exists()
    assert not DeadLetter.objects.exists()


@override_settings(JOBS={"CRON": {"tests.tick": "* * * * *", "tests.hourly": None}})
def test_a_periodic_job_is_fired_by_its_queues_server_with_its_lock_there(redis_db, emails_redis):
    b = client(emails_redis)
    elsewhere = Maintenance(Store(b), ["emails"], 0.1)  # tests.tick goes to "default"
    assert elsewhere.cron.scheduler.tick() == 0
    home = Maintenance(Store(redis_db), ["default"], 0.1, lead=False)
    assert home.cron.scheduler.tick() == 1
    assert CronRun.objects.count() == 1
    assert redis_db.keys("djjobs:cron:tests.tick:*") and not b.keys("djjobs:cron:*")


def test_a_maintenance_pass_that_finds_its_redis_down_raises_so_the_server_is_set_aside(
    redis_db, emails_redis
):
    maintenance = Maintenance(Store(client(emails_redis)), ["emails"], 0.1)
    emails_redis.stop()
    with pytest.raises(redis.ConnectionError):
        maintenance.tick()
    assert not maintenance.ledger.reachable  # once it answers, the ledger sweeps


@pytest.mark.parametrize("role", ["master", "slave"])
def test_a_queue_on_a_redis_cluster_is_an_error_of_the_checks_and_runjobs_refuses_it(
    redis_db, cluster, settings, role
):
    """A real cluster (three primaries, three replicas), the queue pointed at one of its primaries or
    at a replica: its keys would hash to slots on other nodes, so the check and runjobs refuse it."""
    node = next(node for node in cluster.nodes if cluster.client(node).role()[0] == role)
    settings.RQ_QUEUES = {**settings.RQ_QUEUES, "emails": {**settings.RQ_QUEUES["emails"], "URL": node.url}}
    found = [m for m in checks.run_checks() if m.id == "django_jobs.E034"]
    assert len(found) == 1 and "emails" in found[0].msg and "cluster mode" in found[0].msg
    with pytest.raises(CommandError, match="cluster mode"):
        call_command("runjobs", "emails", "--burst")
