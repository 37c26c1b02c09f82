"""``Store.statuses`` reads the status of any number of jobs in a few script calls: each job's own,
None for one whose hash is gone, "" for a key that is not a hash, whatever surrounds it."""

from __future__ import annotations

import pytest

from django_jobs.store import Store, job_key
from django_jobs.store.lifecycle import F, Status
from django_jobs.store.read import STATUS_BATCH
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_statuses_of_more_jobs_than_one_call_reads_come_back_each_its_own(redis_db):
    store = Store.of(redis_db)
    queued = [h.id for h in jobs.record.enqueue_many([(f"s{n}",) for n in range(STATUS_BATCH + 3)])]
    redis_db.hset(job_key(queued[1]), F.STATUS, Status.FINISHED.value)
    redis_db.hset(job_key(queued[STATUS_BATCH]), F.STATUS, Status.CANCELED.value)  # in the second call
    redis_db.set(job_key("garbage"), "not a hash")
    asked = ["gone", *queued, "garbage"]
    found = store.statuses(asked)
    assert list(found) == asked
    assert found["gone"] is None and found["garbage"] == ""
    assert found[queued[1]] == Status.FINISHED.value
    assert found[queued[STATUS_BATCH]] == Status.CANCELED.value
    assert {found[i] for i in queued if i not in (queued[1], queued[STATUS_BATCH])} == {Status.QUEUED.value}
    assert store.statuses([]) == {}
