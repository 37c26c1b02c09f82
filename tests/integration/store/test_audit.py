"""The auditor, on a real Redis: real jobs in every state audit clean, and each kind of inconsistency
planted by hand is named, with its job."""

from __future__ import annotations

import io

import pytest
import redis
from django.core.management import CommandError, call_command

from django_jobs import cancel
from django_jobs.core import registry
from django_jobs.flow import pausing
from django_jobs.store import Claimed, Store, keys, read
from django_jobs.store.audit import audit
from django_jobs.store.lifecycle import State
from django_jobs.testing import run_jobs
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases="__all__")  # a cancel deletes outbox rows


def claim(store: Store, nonce: str) -> Claimed:
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(),
    )  # fmt: skip
    assert claimed is not None
    return claimed


def kinds(connection: redis.Redis) -> set[tuple[str, str]]:
    return {(p.kind, p.job_id) for p in audit(Store.of(connection)).problems}


@pytest.fixture
def lived(redis_db: redis.Redis) -> dict[str, str]:
    """Jobs in most states at once: finished, dead, retrying, snoozed, cancelled, delayed, waiting with
    and without a priority, running, parked by a paused type, in its key's line."""
    store = Store(redis_db)
    done = jobs.record.enqueue("done").id
    dead = jobs.permanent.enqueue("dead").id
    run_jobs(["default"])
    ids = {"done": done, "dead": dead}
    ids["delayed"] = jobs.record.options(delay=3600).enqueue("later").id
    ids["cancelled"] = jobs.record.options(delay=3600).enqueue("cancelled").id
    cancel(ids["cancelled"])
    ids["running"] = jobs.per_account.enqueue("A", "a0").id
    ids["line"] = jobs.per_account.enqueue("A", "a1").id
    running = claim(store, "n1")
    assert running.id == ids["running"]
    assert store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n2", finished_ttl=60,
        limits=registry.limits_json(),
    ).claimed is None  # fmt: skip
    ids["snoozed"] = jobs.record.enqueue("snoozed").id
    snoozing = claim(store, "n3")
    store.snooze(snoozing.token, "default", 3600, 60)
    ids["retrying"] = jobs.always_fails.enqueue("retrying").id
    failing = claim(store, "n4")
    store.fail(failing.token, "default", delay=3600, fields={}, finished_ttl=60)
    pausing.pause(job=jobs.greet)
    ids["parked"] = jobs.greet.enqueue("parked").id
    assert store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n5", finished_ttl=60,
        limits=registry.limits_json(paused=[jobs.greet.name]),
    ).claimed is None  # fmt: skip
    ids["high"] = jobs.record.options(priority=5).enqueue("high").id
    ids["waiting"] = jobs.record.enqueue("waiting").id
    return ids


def test_real_jobs_in_every_state_audit_clean(redis_db, lived):
    result = audit(Store.of(redis_db))
    assert result.problems == [] and result.ok and result.complete


def test_an_id_in_two_structures_is_named(redis_db, lived):
    redis_db.zadd(keys.scheduled_key("default"), {lived["waiting"]: 1})
    assert ("two_places", lived["waiting"]) in kinds(redis_db)


def test_an_id_without_a_hash_is_named(redis_db, lived):
    redis_db.rpush(keys.queue_key("default"), "ghost")
    assert ("no_hash", "ghost") in kinds(redis_db)


def test_a_status_that_disagrees_with_its_structure_is_named(redis_db, lived):
    redis_db.hset(keys.job_key(lived["waiting"]), "status", "started")
    assert ("status", lived["waiting"]) in kinds(redis_db)


def test_a_lease_without_its_wip_entry_is_named(redis_db, lived):
    (token,) = [t.decode() for t in redis_db.zrange(keys.wip_key("default"), 0, -1)]
    redis_db.zrem(keys.wip_key("default"), token)
    assert ("lease_without_wip", lived["running"]) in kinds(redis_db)


def test_a_slot_held_by_a_dead_token_is_named(redis_db, lived):
    redis_db.zadd(keys.slots_key(keys.limit_scope("tests.per_account", "A")), {"gone:n9": 1})
    assert ("dead_slot", "gone") in kinds(redis_db)


def test_a_line_flag_without_a_line_entry_is_named(redis_db, lived):
    redis_db.zrem(keys.parked_line("default", keys.limit_scope("tests.per_account", "A")), lived["line"])
    assert ("line_flag", lived["line"]) in kinds(redis_db)


def test_a_budget_too_small_says_the_look_was_cut_short(redis_db, lived):
    assert not audit(Store.of(redis_db), budget=3).complete


def test_the_read_model_names_each_jobs_state(redis_db, lived):
    found = read.locate(Store.of(redis_db), list(lived.values()))
    states = {name: found[job_id].state for name, job_id in lived.items()}
    assert states == {
        "done": State.FINISHED,
        "dead": State.DEAD,
        "delayed": State.SCHEDULED,
        "cancelled": State.CANCELLED,
        "running": State.RUNNING,
        "line": State.IN_LINE,
        "snoozed": State.SNOOZED,
        "retrying": State.RETRYING,
        "parked": State.PARKED,
        "high": State.WAITING_PRIORITY,
        "waiting": State.WAITING,
    }
    assert found[lived["running"]].token.startswith(lived["running"] + ":")
    assert found[lived["line"]].ahead == 0 and found[lived["line"]].line == "tests.per_account\nA"
    assert found[lived["parked"]].pause is not None and found[lived["parked"]].paused
    assert found[lived["delayed"]].due is not None


def test_a_parked_id_without_dj_parked_is_named(redis_db, lived):
    redis_db.hdel(keys.job_key(lived["parked"]), "dj_parked")
    assert ("parked_flag", lived["parked"]) in kinds(redis_db)


def test_a_wip_token_without_a_lease_is_named(redis_db, lived):
    redis_db.zadd(keys.wip_key("default"), {f"{lived['waiting']}:stale": float("inf")})
    assert ("wip_without_lease", lived["waiting"]) in kinds(redis_db)


def test_a_waiting_hash_no_structure_holds_is_named(redis_db, lived):
    redis_db.lrem(keys.queue_key("default"), 0, lived["waiting"])
    assert ("nowhere", lived["waiting"]) in kinds(redis_db)


def test_a_structure_key_of_the_wrong_type_is_named_and_read_as_empty(redis_db, lived):
    redis_db.delete(keys.DYING)
    redis_db.set(keys.DYING, "garbage")
    assert ("wrong_type", "") in kinds(redis_db)


def test_jobs_health_audit_exits_0_when_clean_and_1_naming_each_problem(redis_db, lived):
    out = io.StringIO()
    call_command("jobs_health", "--audit", stdout=out)
    assert "FAIL" not in out.getvalue() and "ok   audit: default" in out.getvalue()
    redis_db.rpush(keys.queue_key("default"), "ghost")
    out = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("jobs_health", "--audit", stdout=out)
    assert raised.value.returncode == 1
    assert "FAIL audit: no_hash ghost: in rq:queue:default, but it has no hash" in out.getvalue().splitlines()


def test_jobs_health_audit_says_when_the_budget_cut_it_short(redis_db, lived):
    out = io.StringIO()
    call_command("jobs_health", "--audit", "--budget", "2", stdout=out)
    assert "the budget (2) cut the look short" in out.getvalue()
