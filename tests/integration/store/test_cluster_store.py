"""The store on a real Redis Cluster (three primaries, three replicas): each namespace's keys share one
hash slot, so every transition of the lifecycle is one script on the primary that owns it, and
namespaces spread over the primaries. The auditor and the failover watch ask that primary alone."""

from __future__ import annotations

import pytest
from redis.cluster import RedisCluster

from django_jobs.store import Store
from django_jobs.store.audit import audit
from django_jobs.store.keys import Keyspace
from django_jobs.store.lifecycle import State
from django_jobs.store.replication import read_primary
from tests.cluster import LocalCluster
from tests.integration.store.lifecycle_steps import lifecycle_run

pytestmark = pytest.mark.django_db(transaction=True)


def spread(client: RedisCluster, count: int) -> list[str]:
    """Tags of ``count`` namespaces whose slots are owned by as many different primaries."""
    found: dict[str, str] = {}
    for n in range(1000):
        owner = client.get_node_from_key(f"{{ns{n}}}").name
        found.setdefault(owner, f"ns{n}")
        if len(found) == count:
            return list(found.values())
    raise AssertionError("no spread of namespaces found")


def test_the_lifecycle_runs_in_namespaces_spread_over_the_primaries_of_a_cluster(cluster: LocalCluster):
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    tags = spread(client, 3)
    for tag in tags:
        store = Store.of(client, Keyspace(tag))
        states = set(lifecycle_run(store).values())
        assert {State.FINISHED, State.RETRYING, State.DYING, State.RUNNING, State.CANCELLED} <= states
        assert audit(store, ["default"]).ok
        assert read_primary(store).role == "master"
    for tag in tags:  # each namespace on one primary, all of it: no key of it anywhere else
        home = Store.of(client, Keyspace(tag)).home()
        on_home = {key for key in home.scan_iter(match=f"{{{tag}}}*", count=1000)}
        assert on_home
        for node in client.get_primaries():
            other = client.get_redis_connection(node)
            if (
                other.connection_pool.connection_kwargs["port"]
                != home.connection_pool.connection_kwargs["port"]
            ):
                assert not list(other.scan_iter(match=f"{{{tag}}}*", count=1000)), (tag, node.name)
