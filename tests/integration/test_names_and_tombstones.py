"""Limits, unique keys and debounce follow the job, not the name it was queued under; a job that
debounce replaced stays dead whatever order its pushes arrive in."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from rq import Queue
from rq.serializers import JSONSerializer

from django_jobs.client import outbox
from django_jobs.client.backends.redis import push
from django_jobs.client.enqueue import build
from django_jobs.core import registry
from django_jobs.core.envelope import Envelope, Options
from django_jobs.store import Claimed, Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.conftest import wait_for
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])


def envelope(name: str, key: str, *, queue: str = "", age: float = 0.0, **options: object) -> Envelope:
    """A job as some process built it ``age`` seconds ago, under ``name`` (an alias, maybe)."""
    definition = registry.get(name)
    built = build(name, queue or definition.queue, definition.timeout, [key], {}, Options(**options))  # type: ignore[arg-type]
    return dataclasses.replace(built, created_at=built.created_at - dt.timedelta(seconds=age))


def claim(redis_db, nonce: str) -> Claimed | None:
    return Store.of(redis_db).complete_and_claim(
        ["default"],
        finished=None,
        worker_name="test",
        lease_seconds=30,
        nonce=nonce,
        finished_ttl=60,
        limits=registry.limits_json(),
    )[1]


# --- finding 8: limits follow the job --------------------------------------------------------------

NAMES = ["tests.solo", "tests.solo_before_rename"]


@pytest.mark.parametrize(("first", "second"), [NAMES, NAMES[::-1]])
def test_an_alias_and_the_current_name_share_one_concurrency_slot(redis_db, first, second):
    push([envelope(first, "a"), envelope(second, "b")])
    running = claim(redis_db, "n1")
    assert running is not None and running.fields["description"] == first.encode()
    assert claim(redis_db, "n2") is None  # concurrency=1: the other one waits for the slot
    assert redis_db.zcard("rq:scheduled:default") == 1


def test_a_job_that_rq_itself_queued_shares_the_slot(redis_db):
    """RQ stores the call ('tests.solo('b')') as the description: the limit is still the job's."""
    push([envelope("tests.solo", "a")])
    Queue("default", connection=redis_db, serializer=JSONSerializer).enqueue("tests.solo", "b")
    assert claim(redis_db, "n1") is not None
    assert claim(redis_db, "n2") is None


QUOTA = ["tests.hourly_quota", "tests.quota_before_rename"]


@pytest.mark.parametrize(("first", "second"), [QUOTA, QUOTA[::-1]])
def test_an_alias_and_the_current_name_share_one_rate_window(redis_db, first, second):
    push([envelope(first, "a"), envelope(second, "b")])
    assert claim(redis_db, "n1") is not None
    assert claim(redis_db, "n2") is None  # rate="1/h": the second start waits for the next hour
    assert redis_db.zcard("rq:scheduled:default") == 1


def test_limits_map_every_alias_to_the_canonical_job():
    published = registry.limits_json()
    assert '"tests.solo_before_rename": [1, 0, 1, "tests.solo"]' in published
    assert '"tests.quota_before_rename": [0, 1, 3600.0, "tests.hourly_quota"]' in published


def test_a_unique_key_is_held_across_an_alias_and_the_current_name(redis_db):
    held = envelope("tests.debounced_before_rename", "old", unique_key="doc:1")
    dropped = envelope("tests.debounced", "new", unique_key="doc:1")
    assert push([held, dropped]).seen == {dropped.id}


# --- finding 9: a replaced job stays dead ------------------------------------------------------------


def relay(redis_db) -> None:
    """The runjobs relay, once: it pushes every outbox row older than a second."""
    Maintenance(Store.of(redis_db), ["default", "emails"], 0.1).relay.run()


def debounced(key: str, age: float, name: str = "tests.debounced", **extra: object) -> Envelope:
    return envelope(name, key, age=age, unique_key="doc:7", debounce=0.2, **extra)


def ran() -> list[str]:
    wait_for(lambda: run_jobs() == 0 and SideEffect.objects.exists(), timeout=10)
    return list(SideEffect.objects.values_list("key", flat=True))


def assert_tombstone(redis_db, stale: Envelope, newer: Envelope) -> None:
    fields = redis_db.hgetall(f"rq:job:{stale.id}")
    assert fields[b"status"] == b"canceled" and fields[b"dj_replaced_by"] == newer.id.encode()
    assert b"data" not in fields  # the stale arguments are not kept
    assert redis_db.ttl(f"rq:job:{stale.id}") >= redis_db.ttl("djjobs:unique:doc:7") - 1


def test_the_relay_pushing_a_replaced_jobs_row_does_not_bring_it_back(redis_db):
    stale, newer = debounced("stale", age=5), debounced("newer", age=4)
    outbox.row(stale).save()  # the on-commit push landed, and the row waits for the relay to prune it
    push([stale])
    push([newer])  # replaces it inside its window
    relay(redis_db)
    assert_tombstone(redis_db, stale, newer)
    assert ran() == ["newer"]


@pytest.mark.parametrize("name", ["tests.debounced", "tests.debounced_before_rename"])
@pytest.mark.usefixtures("fast")
def test_a_stale_row_relayed_after_its_replacement_never_runs(redis_db, name):
    stale, newer = debounced("stale", age=5, name=name), debounced("newer", age=4)
    outbox.row(stale).save()  # its on-commit push failed: only the relay can deliver it
    push([newer])
    relay(redis_db)
    assert_tombstone(redis_db, stale, newer)
    assert redis_db.get("djjobs:unique:doc:7") == newer.id.encode()
    assert ran() == ["newer"]


@pytest.mark.usefixtures("fast")
def test_a_stale_row_relayed_after_its_replacement_finished_never_runs(redis_db):
    stale, newer = debounced("stale", age=5), debounced("newer", age=4)
    outbox.row(stale).save()
    push([newer])
    assert ran() == ["newer"]
    relay(redis_db)
    assert_tombstone(redis_db, stale, newer)
    assert run_jobs() == 0 and redis_db.zcard("rq:scheduled:default") == 0


def test_a_stale_row_relayed_before_its_replacement_is_replaced(redis_db):
    stale, newer = debounced("stale", age=5), debounced("newer", age=4)
    outbox.row(stale).save()
    relay(redis_db)
    push([newer])
    push([stale])  # any later push of it is a no-op
    assert_tombstone(redis_db, stale, newer)
    assert ran() == ["newer"]


def test_debounce_replaces_the_waiting_job_in_whatever_queue_it_waits(redis_db):
    """A deploy moved the job to another queue: the newer enqueue still replaces the waiting one."""
    stale, newer = debounced("stale", age=5), debounced("newer", age=4, queue="emails")
    push([stale])
    push([newer])
    assert_tombstone(redis_db, stale, newer)
    assert redis_db.zcard("rq:scheduled:default") == 0 and redis_db.zcard("rq:scheduled:emails") == 1
