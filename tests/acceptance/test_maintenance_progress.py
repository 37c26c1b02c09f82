"""A dead worker's job restarts even behind garbage that maintenance cannot settle."""

from __future__ import annotations

import pytest
import redis

from django_jobs.models import DeadLetter
from django_jobs.store import LOST
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def garbage(client: redis.Redis) -> int:
    """150 lost entries older than any real one: unreadable, vanished, too long, not a hash."""
    members: dict[bytes, float] = {}
    for i in range(50):
        members[b"\xff\xfe" + str(i).encode() + b":n"] = 0  # an id that is not UTF-8
        members[f"vanished{i}:n".encode()] = 0  # its hash was evicted
    for i in range(25):
        members[b"z" * 100 + str(i).encode() + b":n"] = 0  # longer than any id column
        client.set(f"rq:job:str{i}", "garbage")
        members[f"str{i}:n".encode()] = 0  # the key is not a hash
    client.zadd(LOST, members)
    return len(members)


def test_a_killed_workers_job_restarts_behind_150_garbage_lost_entries(private_redis, runjobs):
    env = {"JOBS_TEST_REDIS_URL": private_redis.url}
    client = redis.Redis.from_url(private_redis.url)
    victim = runjobs(extra_env=env)
    handle = jobs.slow.enqueue("behind-garbage", 4)
    wait_for(lambda: SideEffect.objects.filter(key="attempt:behind-garbage").exists())
    victim.kill_tree()  # its lease expires; only another runjobs can take the job back
    planted = garbage(client)
    survivor = runjobs(extra_env=env)
    wait_for(lambda: SideEffect.objects.filter(key="behind-garbage").exists(), timeout=40)
    assert client.hget(f"rq:job:{handle.id}", "dj_attempt") == b"2"
    wait_for(lambda: DeadLetter.objects.open().quarantined().count() == planted)
    assert DeadLetter.objects.filter(reason=DeadLetter.Reason.VANISHED).count() == 50
    assert client.zcard(LOST) == 0
    assert "Quarantined djjobs:lost item" in survivor.output()
    assert survivor.proc.poll() is None
