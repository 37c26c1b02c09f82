"""A store names every key through its keyspace. In a tagged keyspace (the cluster layout's names),
each transition of the lifecycle, run here on a standalone Redis, writes only keys that carry the tag,
so on a Redis Cluster all of them would hash to one slot; the standalone keyspace keeps RQ's names."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from django_jobs.client.enqueue import build
from django_jobs.core import registry
from django_jobs.core.envelope import Options
from django_jobs.store import Finished, Store, lifecycle
from django_jobs.store.audit import audit
from django_jobs.store.browse import Listing, page
from django_jobs.store.keys import STANDALONE, Keyspace
from django_jobs.store.lifecycle import State
from django_jobs.store.read import where
from django_jobs.store.replication import note_primary, push_confirmed, read_primary
from django_jobs.worker.structure import expected_types

pytestmark = pytest.mark.django_db(transaction=True)

TAG = "orders"


def claim(store: Store, nonce: str, want: int = 1, done: Finished | None = None):
    return store.claim_batch(
        ["default"], finished=done, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(), want=want,
    )  # fmt: skip


def lifecycle_run(store: Store) -> dict[str, State]:
    """Push, claim, complete, retry, dead-letter, snooze, cancel, pause, unpark, run now and reap,
    each through ``store``; returns where each job ended up, read back through it."""
    name = "tests.record"
    plain = [build(name, "default", 10, [f"p{n}"], {}) for n in range(4)]
    unique = build(name, "default", 10, ["u"], {}, Options(unique_key="one"))
    first = build(name, "default", 10, ["hi"], {}, Options(priority=5))
    later = build(name, "default", 10, ["later"], {}, Options(delay=3600))
    keyed = build("tests.per_account", "default", 10, ["A", "k1"], {}, limit_key="A")
    keyed_behind = build("tests.per_account", "default", 10, ["A", "k2"], {}, limit_key="A")
    limited = build("tests.solo", "default", 10, ["s"], {})
    duplicate = build(name, "default", 10, ["u2"], {}, Options(unique_key="one"))
    assert store.push([*plain, unique, first, later, keyed, keyed_behind, limited]) == set()
    assert store.push([duplicate]) == {duplicate.id}
    got = claim(store, "a", want=3).leased
    assert got[0].id == first.id  # the higher priority first
    done = Finished(got[0].token, "default")
    second = claim(store, "b", done=done).leased
    store.fail(got[1].token, "default", delay=60, fields={"dj_reason": "retry"}, finished_ttl=60)
    store.fail(got[2].token, "default", delay=None, fields={"dj_reason": "dead"}, finished_ttl=60)
    assert store.heartbeat([second[0].token], 30).gone == set()
    store.snooze(second[0].token, "default", 30, 60)
    assert store.pause("job", "tests.solo", by="test", reason="") is True
    rest = []
    while batch := claim(store, f"r{len(rest)}", want=5).leased:
        rest += batch
    assert store.run_now(later.id, "default") == 1
    store.cancel(later.id, 60)
    store.resume("job", "tests.solo")
    store.unpark("default", "tests.solo")
    store.maintain(["default"], registry.limits_json())
    note_primary(store, read_primary(store))  # the failover watch's record
    extra = build(name, "default", 10, ["replicated"], {})
    assert push_confirmed(store, [extra], replicas=0, timeout=0.01).seen == set()  # bumps the mark
    store.buried(extra.id, 60)  # a settled dead letter's hash expires: one more write of a job key
    ids = [j.id for j in (*plain, unique, first, later, keyed, keyed_behind, limited)]
    assert page(store, "default", Listing.RUNNING).total == len(rest)
    assert store.statuses(ids)[first.id] == lifecycle.Status.FINISHED
    return {job_id: where(store, job_id, ["default"]).state for job_id in ids}


def test_a_tagged_keyspace_writes_every_key_of_the_lifecycle_in_one_hash_slot(redis_db):
    store = Store.of(redis_db, Keyspace(TAG))
    states = lifecycle_run(store)
    assert {
        State.FINISHED,
        State.RETRYING,
        State.DYING,
        State.SNOOZED,
        State.RUNNING,
        State.CANCELLED,
    } <= set(states.values())
    assert State.IN_LINE in states.values() or State.SCHEDULED in states.values()  # the key's second job
    written = [key.decode() for key in redis_db.scan_iter(count=1000)]
    assert written and all(key.startswith("{" + TAG + "}") for key in written), sorted(written)
    assert len({key_slot(key.encode()) for key in written}) == 1
    assert audit(store, ["default"]).ok
    assert all(key.startswith("{" + TAG + "}") for key in expected_types(store.keys, ["default"]))
    some = next(iter(states))
    assert Store.of(redis_db).statuses([some]) == {some: None}  # the standalone names hold none of it


def test_the_standalone_keyspace_keeps_the_tables_names_and_a_tag_prefixes_every_namespaced_one():
    tagged = Keyspace(TAG)
    for name, structure in lifecycle.STRUCTURES.items():
        parts = dict.fromkeys(structure.pattern.replace("{", "}").split("}")[1::2], "x")
        plain = STANDALONE.name(structure, **parts)
        assert plain == structure.key(**parts), name
        expected = plain if structure.shared else "{" + TAG + "}" + plain
        assert tagged.name(structure, **parts) == expected, name
    assert STANDALONE.job("j") == "rq:job:j" and tagged.job("j") == "{orders}rq:job:j"
    assert tagged.layout("q") == tuple("{orders}" + key for key in STANDALONE.layout("q"))
    with pytest.raises(ValueError, match="brace"):
        Keyspace("a{b")


def test_the_same_run_in_the_standalone_keyspace_writes_rqs_names(redis_db):
    lifecycle_run(Store.of(redis_db))
    written = {key.decode() for key in redis_db.scan_iter(count=1000)}
    assert {"rq:queues", "rq:wip:default", "djjobs:leases"} <= written
    assert not any(key.startswith("{") for key in written)
    assert audit(Store.of(redis_db), ["default"]).ok
