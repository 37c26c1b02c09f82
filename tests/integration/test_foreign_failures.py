"""The maintenance duty that reclaims what a foreign worker failed reads RQ's failed registry a page at
a time: RQ's own failures (no django_jobs job) and an item it cannot handle are passed over, so a
job of ours behind them is reached within a few passes, never held back for ever."""

from __future__ import annotations

import zlib

import pytest

from django_jobs.models import DeadLetter
from django_jobs.store import Store, keys
from django_jobs.worker.duties.foreign import PAGE
from django_jobs.worker.maintenance import Maintenance
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")


def test_a_job_of_ours_behind_a_page_of_rqs_own_failures_and_a_broken_item_is_reclaimed(redis_db):
    failed = keys.failed_key("default")
    for n in range(PAGE + 5):  # RQ's own jobs: no django_jobs fields, left where RQ put them
        redis_db.hset(f"rq:job:rq{n}", mapping={"status": "failed", "origin": "default"})
        redis_db.zadd(failed, {f"rq{n}": n})
    redis_db.set("rq:job:broken", "not a hash")
    redis_db.zadd(failed, {"broken": PAGE + 6})
    job_id = jobs.record.enqueue("taken").id
    redis_db.lrem(keys.queue_key("default"), 0, job_id)
    data = redis_db.hget(keys.job_key(job_id), "data")
    redis_db.hset(keys.job_key(job_id), mapping={"status": "failed", "data": zlib.compress(data)})
    redis_db.zadd(failed, {job_id: PAGE + 7})
    maintenance = Maintenance(Store.of(redis_db), ["default"], 0.1)
    for _ in range(3):
        maintenance.foreign.run()
    letter = DeadLetter.objects.get(job_id=job_id)
    assert letter.reason == DeadLetter.Reason.FOREIGN and letter.args == ["taken"]
    assert redis_db.zcard(failed) == PAGE + 6  # RQ's own and the broken one stay, for RQ's tools
