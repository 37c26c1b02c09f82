"""Fairness per key (``limit_key``) with real ``runjobs``: the small keys' jobs finish long before a big
key's backlog queued ahead of them, never two of one key at once and each key's in the order it was
enqueued; a runjobs SIGKILLed while it holds a key's slot strands none of the jobs parked behind it.

``JOBS_FAIRNESS_BIG`` (200) and ``JOBS_FAIRNESS_SMALL`` (20 for each of 3 small keys) scale the first
one up; ``benchmarks/fairness.py`` is its measured form."""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import pytest

from django_jobs.flow import pausing
from tests.acceptance.test_flow_control import max_overlap
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

BIG = int(os.environ.get("JOBS_FAIRNESS_BIG", "200"))
SMALL = int(os.environ.get("JOBS_FAIRNESS_SMALL", "20"))
LINE = "djjobs:parked:default\ntests.per_account\nA"


class Ran(NamedTuple):
    account: str
    key: str
    start: float
    end: float


def ran() -> list[Ran]:
    """Every finished job, in the order they finished (each writes its row as it ends)."""
    rows = [key.split("|") for key in SideEffect.objects.order_by("pk").values_list("key", flat=True)]
    return [Ran(account, key, float(start), float(end)) for account, key, start, end in rows]


def one_at_a_time_in_order(done: list[Ran], account: str, keys: list[str]) -> None:
    mine = sorted((row for row in done if row.account == account), key=lambda row: row.start)
    assert [row.key for row in mine] == keys
    assert max_overlap([(row.start, row.end) for row in mine]) == 1


def test_small_keys_finish_long_before_a_big_backlog_queued_ahead_of_them(runjobs):
    jobs.per_account.enqueue_many([("big", f"b{i}", 0.005) for i in range(BIG)])
    small = ["s1", "s2", "s3"]
    for account in small:
        jobs.per_account.enqueue_many([(account, f"{account}.{i}", 0.005) for i in range(SMALL)])
    worker = runjobs("--concurrency", "2", "--burst")
    assert worker.proc.wait(timeout=300) == 0, worker.output()  # --burst: out once every line is empty
    done = ran()
    assert len(done) == BIG + len(small) * SMALL
    last_small = max(n for n, row in enumerate(done) if row.account != "big")
    big_first = sum(1 for row in done[:last_small] if row.account == "big")
    assert big_first < BIG / 2, big_first  # in plain FIFO order all of the big key's would go first
    one_at_a_time_in_order(done, "big", [f"b{i}" for i in range(BIG)])
    for account in small:
        one_at_a_time_in_order(done, account, [f"{account}.{i}" for i in range(SMALL)])


def test_a_runjobs_killed_holding_a_keys_slot_strands_none_of_the_jobs_parked_behind_it(runjobs, redis_db):
    jobs.per_account.enqueue_many([("A", f"a{i}", 0.3) for i in range(6)])
    killed = runjobs("--concurrency", "2")
    wait_for(lambda: redis_db.zcard("djjobs:leases") == 1 and redis_db.zcard(LINE) == 5)
    killed.kill_tree()  # a0's lease, and with it A's only slot, is held by nobody now
    runjobs("--concurrency", "2")  # reaps the lease once it expires; a0 runs again, then the rest
    wait_for(lambda: SideEffect.objects.count() == 6, timeout=60)
    one_at_a_time_in_order(ran(), "A", [f"a{i}" for i in range(6)])
    assert not redis_db.keys("djjobs:parked*")


def test_a_pause_and_resume_of_a_keyed_type_keeps_each_keys_jobs_in_their_order(runjobs):
    """Paused while its keys' lines hold jobs (and one of each may be woken, holding its slot), resumed
    after maintenance has looked at the lines several times: each key's jobs still start in order."""
    for account in ("A", "B"):
        jobs.per_account.enqueue_many([(account, f"{account}{i}", 0.2) for i in range(15)])
    runjobs("--concurrency", "2")
    wait_for(lambda: SideEffect.objects.count() >= 4)
    pausing.pause(job=jobs.per_account)
    time.sleep(4)  # maintenance looks at the lines every second meanwhile
    pausing.resume(job=jobs.per_account)
    wait_for(lambda: SideEffect.objects.count() == 30, timeout=60)
    for account in ("A", "B"):
        one_at_a_time_in_order(ran(), account, [f"{account}{i}" for i in range(15)])
