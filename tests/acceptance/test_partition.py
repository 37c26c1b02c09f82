"""A host cut off from the network: one runjobs (A) reaches Redis, or its database, through a TCP
proxy that the test partitions for longer than a lease, while another runjobs (B) keeps its links.

A partition drops traffic silently (``CuttableProxy.partition``): A learns of it only by its own
timeouts, and what it sent during it may still land after the heal. ``JOBS_PARTITION_LEASE`` (2 s),
``JOBS_PARTITION_SECONDS`` (2.5 leases) and ``JOBS_PARTITION_JOBS`` (2 jobs cut off mid-run, besides
one under a concurrency limit) make a long run.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import transaction

from django_jobs import get_job
from django_jobs.models import DeadLetter
from tests.chaos import CuttableProxy
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

LEASE = float(os.environ.get("JOBS_PARTITION_LEASE", "2"))
SECONDS = float(os.environ.get("JOBS_PARTITION_SECONDS", str(2.5 * LEASE)))
JOBS = int(os.environ.get("JOBS_PARTITION_JOBS", "2"))


def done(key: str) -> int:
    return SideEffect.objects.filter(key=key).count()


def runs(path: Path) -> dict[int, tuple[float, float]]:
    """Per runjobs (its pid), the first and the last mark its attempts at one job left."""
    seen: dict[int, tuple[float, float]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        pid, at = int(line.split()[0]), float(line.split()[1])
        first, _ = seen.get(pid, (at, at))
        seen[pid] = (first, at)
    return seen


def serving(client: redis.Redis, processes: int) -> None:
    """Wait until that many work processes are registered: every runjobs started is serving."""
    wait_for(lambda: client.scard("rq:workers") == processes, timeout=30)


def two_hosts(runjobs, env, link, work, marks: Path, client: redis.Redis):
    """Start A, whose link to Redis or to the database goes through the proxy (``link``: its settings
    for that), on every queue, and give it ``work``; once their first attempts all run (each would
    run 30 s), start B beside it, on "default" only (jobs queued on "emails" are A's), and wait until
    both serve. A has a work process to spare. Returns A, B and the handles of ``work``."""
    a = runjobs("--concurrency", str(len(work) + 1), extra_env={**env, **link})
    handles = {key: job.enqueue(key, str(marks / key), 30) for key, job in work.items()}
    wait_for(lambda: all(a.proc.pid in runs(marks / key) for key in work), timeout=30)
    b = runjobs("default", "--concurrency", "2", extra_env=env)
    serving(client, len(work) + 1 + 2)
    return a, b, handles


def outcomes(client: redis.Redis, name: str) -> Counter[str]:
    """The outcome counters of job ``name`` the overview reads, over every minute they cover."""
    counts: Counter[str] = Counter()
    for key in client.keys("djjobs:stats:m:*"):
        for field, n in client.hgetall(key).items():
            job, _, outcome = field.decode().rpartition("|")
            if job == name:
                counts[outcome] += int(n)
    return counts


def test_a_host_cut_off_from_redis_stops_its_attempts_before_another_host_takes_them_over(
    private_redis, runjobs, tmp_path
):
    proxy = CuttableProxy(private_redis.port)
    proxy.start()
    # every attempt's outcome logged: a failure shows both hosts' logs
    env = {"JOBS_TEST_REDIS_URL": private_redis.url, "JOBS_TEST_LEASE": str(LEASE), "JOBS_TEST_LOG": "INFO"}
    link = {"JOBS_TEST_REDIS_URL": f"redis://127.0.0.1:{proxy.port}/0"}
    cut = {f"job{i}": jobs.cut_off for i in range(JOBS)} | {"limited": jobs.cut_off_limited}
    work = cut | {"returned": jobs.cut_off_result}
    client = redis.Redis.from_url(private_redis.url)
    a, b, handles = two_hosts(runjobs, env, link, work, tmp_path, client)

    cut_at = time.time()
    proxy.partition()
    (tmp_path / "returned.go").touch()  # this attempt returns now: its completion cannot reach Redis
    time.sleep(SECONDS)
    proxy.heal()

    wait_for(lambda: all(done(key) for key in work), timeout=30)
    for key in cut:
        ran = runs(tmp_path / key)
        assert set(ran) == {a.proc.pid, b.proc.pid}, ran
        # A stopped its attempt before its lease could expire, so B started it only after A's ended
        assert ran[a.proc.pid][1] < cut_at + LEASE, (key, ran, cut_at)
        assert ran[a.proc.pid][1] < ran[b.proc.pid][0], (key, ran)
        assert (done(f"end:{key}"), done(key)) == (1, 1), key  # only B's attempt ran to its end
    ran = runs(tmp_path / "returned")  # its lease expired before its completion landed: B ran it again
    assert ran[a.proc.pid][1] < ran[b.proc.pid][0], ran  # at least once, never alongside itself
    assert (done("end:returned"), done("returned")) == (2, 1)  # its side effect once

    # A reconnects: with B gone it takes new work, and the limited job's slot is free
    assert b.terminate() == 0
    jobs.record.enqueue("a-back")
    jobs.cut_off_limited.enqueue("limited-again", str(tmp_path / "again"), 0.1)
    wait_for(lambda: done("a-back") and done("limited-again"), timeout=30)
    assert set(runs(tmp_path / "again")) == {a.proc.pid}
    assert a.output().count("killed its attempt") == JOBS + 1, a.output()  # by its lease guard

    for key, handle in handles.items():  # finished once, by B's second attempt
        assert client.hmget(f"rq:job:{handle.id}", "status", "dj_attempt") == [b"finished", b"2"], key
    assert get_job(handles["returned"].id).result == b.proc.pid  # A's late completion was refused
    # A's last success is completed by its next claim, a moment after the job's own side effect
    wait_for(lambda: not client.zcard("djjobs:leases") and not client.zcard("djjobs:lost"), timeout=10)
    time.sleep(1.5)  # every process writes its outcome counters at most once a second
    # each attempt counted once: A's cut-off attempts as lost (by B's reaper), B's as successes
    assert outcomes(client, "tests.cut_off") == Counter(lost=JOBS, success=JOBS)
    assert outcomes(client, "tests.cut_off_limited") == Counter(lost=1, success=2)
    assert a.proc.poll() is None


@pytest.mark.skipif(
    settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
    reason="a database cut needs a database server to cut off",
)
@pytest.mark.parametrize("how", ["cut", "partition"])
def test_a_host_cut_off_from_its_database_finishes_each_job_once(redis_db, runjobs, tmp_path, how):
    """Cut (its connections reset), A's attempts fail on their database writes and are retried;
    across a partition shorter than their timeout, they wait for the database and finish after the
    heal. A dead letter A could not write meanwhile is written once; A's supervisor works again."""
    proxy = CuttableProxy(int(settings.DATABASES["default"]["PORT"]))
    proxy.start()
    env = {"JOBS_TEST_LEASE": str(LEASE)}
    work = {f"job{i}": jobs.cut_off for i in range(JOBS)}
    a, b, handles = two_hosts(runjobs, env, {"PGPORT": str(proxy.port)}, work, tmp_path, redis_db)

    proxy.cut() if how == "cut" else proxy.partition()
    for key in work:
        (tmp_path / f"{key}.go").touch()  # A's attempts go on to their database writes
    dead = jobs.cut_off_refused.options(queue="emails").enqueue("dead")  # only A serves "emails"
    time.sleep(SECONDS)
    proxy.restore() if how == "cut" else proxy.heal()

    wait_for(lambda: all(done(key) for key in work), timeout=30)
    wait_for(lambda: DeadLetter.objects.filter(job_id=dead.id).exists(), timeout=30)
    attempts = 0
    for key, handle in handles.items():
        assert (done(f"end:{key}"), done(key)) == (1, 1), key  # A's failed attempts wrote nothing
        status, attempt = redis_db.hmget(f"rq:job:{handle.id}", "status", "dj_attempt")
        assert status == b"finished" and int(attempt) >= (2 if how == "cut" else 1), (key, attempt)
        attempts += int(attempt)

    # A's supervisor works again: with B gone, only A's outbox relay can deliver a row without a hook
    assert b.terminate() == 0
    transaction.set_autocommit(False)
    jobs.record.enqueue("relayed by A")
    transaction.commit()
    transaction.set_autocommit(True)
    wait_for(lambda: done("relayed by A"), timeout=30)
    time.sleep(1.5)  # every process writes its outcome counters at most once a second
    counted = outcomes(redis_db, "tests.cut_off")  # each attempt once; a failed one is retried
    assert (counted["success"], counted.total(), counted["dead"]) == (JOBS, attempts, 0), counted
    assert outcomes(redis_db, "tests.cut_off_refused") == Counter(dead=1)  # counted once
    assert DeadLetter.objects.count() == 1
    assert not redis_db.zcard("djjobs:leases") and not redis_db.zcard("djjobs:dying")
    assert a.proc.poll() is None
