"""Retries, dead letters and poison jobs, run in-process through the worker's own code path."""

from __future__ import annotations

import json
import os
import pickle
import time
import zlib
from pathlib import Path

import pytest
from django.core import mail
from rq import Queue
from rq.serializers import JSONSerializer

from django_jobs.models import DeadLetter
from django_jobs.signals import job_dead_lettered, job_failed
from django_jobs.testing import run_jobs
from tests.testapp import jobs
from tests.testapp.alerts import ALERTED
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def drain(timeout=10.0):
    """Run jobs, retries included, until nothing is queued or scheduled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_jobs()
        from django_jobs.core.connections import get_connection

        redis = get_connection("default")
        if not redis.llen("rq:queue:default") and not redis.zcard("rq:scheduled:default"):
            return
        time.sleep(0.02)
    raise AssertionError("jobs did not drain")


def attempts(key):
    return SideEffect.objects.filter(key=f"attempt:{key}").count()


def test_a_flaky_job_is_retried_then_succeeds():
    jobs.fails_then_succeeds.enqueue("f", failures=2)
    drain()
    assert attempts("f") == 3
    assert SideEffect.objects.filter(key="f").count() == 1
    assert not DeadLetter.objects.exists()


def test_a_failing_job_is_retried_with_backoff_then_dead_lettered_with_its_history(redis_db):
    failures = []
    job_failed.connect(lambda **kw: failures.append(kw["exception"]), weak=False, dispatch_uid="t")
    try:
        handle = jobs.always_fails.enqueue("x")
        drain()
    finally:
        job_failed.disconnect(dispatch_uid="t")
    assert attempts("x") == 3  # FAST policy: max_attempts=3
    entry = DeadLetter.objects.get()
    assert entry.job_id == handle.id
    assert entry.reason == DeadLetter.Reason.EXHAUSTED
    assert entry.exception == "builtins.ConnectionError"
    assert entry.message == "upstream down"
    assert "ConnectionError: upstream down" in entry.traceback
    assert entry.attempts == 3
    assert [h["attempt"] for h in entry.history] == [1, 2, 3]
    assert entry.args == ["x"] and entry.queue == "default" and entry.job_name == "tests.always_fails"
    assert all(isinstance(f, ConnectionError) for f in failures) and len(failures) == 3
    assert [handle.id] == ALERTED
    assert len(mail.outbox) == 1 and "tests.always_fails" in mail.outbox[0].subject


def test_permanent_errors_skip_retries(redis_db):
    received = []
    job_dead_lettered.connect(lambda **kw: received.append(kw["dead_letter"]), weak=False, dispatch_uid="d")
    try:
        jobs.invalid.enqueue("p1")
        jobs.permanent.enqueue("p2")
        drain()
    finally:
        job_dead_lettered.disconnect(dispatch_uid="d")
    assert attempts("p1") == 1 and attempts("p2") == 1
    assert set(DeadLetter.objects.values_list("reason", flat=True)) == {DeadLetter.Reason.PERMANENT}
    assert {d.job_name for d in received} == {"tests.invalid", "tests.permanent"}
    assert not redis_db.zcard("rq:scheduled:default")


def test_a_broken_alert_hook_does_not_break_the_worker(settings):
    settings.JOBS = {**settings.JOBS, "ALERT_HOOKS": ["tests.nowhere.hook", "tests.testapp.alerts.remember"]}
    handle = jobs.permanent.enqueue("p")
    drain()
    assert DeadLetter.objects.filter(job_id=handle.id).exists()
    assert [handle.id] == ALERTED


def test_same_payload_twice_gives_one_side_effect():
    jobs.record_once.enqueue("same")
    jobs.record_once.enqueue("same")
    drain()
    assert SideEffect.objects.filter(key="same").count() == 1


def test_an_unregistered_function_named_in_redis_is_refused_and_dead_lettered(redis_db, tmp_path):
    marker = tmp_path / "pwned"
    rq_queue = Queue("default", connection=redis_db, serializer=JSONSerializer)
    evil = rq_queue.enqueue("os.system", f"touch {marker}")
    jobs.record.enqueue("healthy")
    drain()
    assert not marker.exists()
    entry = DeadLetter.objects.get(job_id=evil.id)
    assert entry.reason == DeadLetter.Reason.UNREGISTERED
    assert entry.job_name == "os.system"
    assert "os.system" in entry.raw  # the raw job hash is kept for the operator
    assert SideEffect.objects.filter(key="healthy").exists()


class _Evil:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_a_pickle_payload_is_never_unpickled(redis_db, tmp_path):
    marker = tmp_path / "unpickled"
    pickled = Queue("default", connection=redis_db)  # RQ's default serializer: pickle
    job = pickled.enqueue("tests.record", _Evil(marker))
    assert zlib.decompress(redis_db.hget(f"rq:job:{job.id}", "data"))[:1] == b"\x80"  # really pickle
    jobs.record.enqueue("healthy")
    drain()
    assert not marker.exists()
    entry = DeadLetter.objects.get(job_id=job.id)
    assert entry.reason == DeadLetter.Reason.UNDECODABLE
    assert entry.exception == "django_jobs.exceptions.PayloadError"
    assert SideEffect.objects.filter(key="healthy").exists()
    assert pickle


def test_garbage_fields_do_not_stop_a_valid_job(redis_db):
    handle = jobs.record.enqueue("tolerant")
    redis_db.hset(
        f"rq:job:{handle.id}",
        mapping={"status": "???", "timeout": "soon", "created_at": "yesterday", "dj_attempt": "many"},
    )
    drain()
    assert SideEffect.objects.filter(key="tolerant").exists()


def test_a_job_key_that_is_not_a_hash_is_dead_lettered_and_the_next_job_runs(redis_db):
    redis_db.set("rq:job:notahash", "garbage")
    redis_db.rpush("rq:queue:default", "notahash")
    jobs.record.enqueue("after")
    drain()
    assert SideEffect.objects.filter(key="after").exists()
    assert redis_db.zcard("djjobs:dying") == 1  # recorded from the raw key by the supervisor's sweep
    from django_jobs.store import Store
    from django_jobs.worker.maintenance import Maintenance

    redis_db.zadd("djjobs:dying", {"notahash": 0})  # pretend 30 s passed
    Maintenance(Store(redis_db), ["default"], 0.1).dying.run()
    entry = DeadLetter.objects.get(job_id="notahash")
    assert entry.reason == DeadLetter.Reason.UNDECODABLE
    assert "WRONGTYPE" in entry.raw


def test_a_payload_that_is_not_json_is_dead_lettered(redis_db):
    handle = jobs.record.enqueue("broken")
    redis_db.hset(f"rq:job:{handle.id}", "data", b"\x00not json")
    drain()
    entry = DeadLetter.objects.get(job_id=handle.id)
    assert entry.reason == DeadLetter.Reason.UNDECODABLE
    assert entry.attempts == 1
    assert json.loads(entry.raw)["data"].endswith("not json")


def test_aliases_run_jobs_queued_under_an_old_name(redis_db):
    handle = jobs.renamed.enqueue("renamed")
    redis_db.hset(f"rq:job:{handle.id}", "data", json.dumps(["tests.old_name", None, ["old"], {}]))
    drain()
    assert SideEffect.objects.filter(key="old").exists()


def test_typed_arguments_arrive_exactly(redis_db):
    import datetime as dt
    import uuid
    import zoneinfo
    from decimal import Decimal

    values = {
        "u": uuid.UUID(int=7),
        "d": dt.date(2026, 1, 2),
        "m": Decimal("1.10"),
        "t": dt.datetime(2026, 3, 29, 1, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
    }
    jobs.echo_types.enqueue("types", **values)
    drain()
    row = SideEffect.objects.get().key
    assert "Decimal('1.10')" in row and "UUID('00000000-0000-0000-0000-000000000007')" in row
    assert "zoneinfo.ZoneInfo(key='Europe/Paris')" in row and "datetime.date(2026, 1, 2)" in row
