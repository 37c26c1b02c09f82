"""A store names every key through its keyspace. In a tagged keyspace (the cluster layout's names),
each transition of the lifecycle, run here on a standalone Redis, writes only keys that carry the tag,
so on a Redis Cluster all of them would hash to one slot; the standalone keyspace keeps RQ's names."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from django_jobs.store import Store, lifecycle
from django_jobs.store.audit import audit
from django_jobs.store.keys import STANDALONE, Keyspace
from django_jobs.store.lifecycle import State
from django_jobs.worker.structure import expected_types
from tests.integration.store.lifecycle_steps import lifecycle_run

pytestmark = pytest.mark.django_db(transaction=True)

TAG = "orders"


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
    for bad in ("a{b", "a:b", "x" * 65):
        with pytest.raises(ValueError, match="letters, digits"):
            Keyspace(bad)
    assert Keyspace(TAG) == tagged and len({Keyspace(TAG), tagged, STANDALONE}) == 2


def test_the_same_run_in_the_standalone_keyspace_writes_rqs_names(redis_db):
    lifecycle_run(Store.of(redis_db))
    written = {key.decode() for key in redis_db.scan_iter(count=1000)}
    assert {"rq:queues", "rq:wip:default", "djjobs:leases"} <= written
    assert not any(key.startswith("{") for key in written)
    assert audit(Store.of(redis_db), ["default"]).ok
