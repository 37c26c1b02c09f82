"""A real Redis Cluster of our own on loopback ports: primaries with a replica each, made by
``redis-cli --cluster create``, for the tests of what django_jobs does with a cluster."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.chaos import RedisServer


class LocalCluster:
    """``primaries`` primaries (the 16,384 slots split between them) with ``replicas`` replicas each;
    ``node_timeout`` ms before a silent primary's replica takes over."""

    def __init__(
        self, directory: Path, primaries: int = 3, replicas: int = 1, node_timeout: int = 1000
    ) -> None:
        self.replicas = replicas
        self.nodes: list[RedisServer] = []
        for number in range(primaries * (1 + replicas)):
            home = directory / f"node{number}"
            home.mkdir(parents=True)
            options = ["--cluster-enabled", "yes", "--cluster-config-file", str(home / "nodes.conf")]
            self.nodes.append(RedisServer(home, *options, "--cluster-node-timeout", str(node_timeout)))

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in self.nodes),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.wait_ok()

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every running node says the cluster is ok: each slot served by a primary."""
        deadline = time.monotonic() + timeout
        while True:
            states = [self.client(node).cluster("info")["cluster_state"] for node in self.nodes if node.proc]
            if all(state == "ok" for state in states):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster is not ok after {timeout:g} s: {states}")
            time.sleep(0.05)

    @staticmethod
    def client(node: RedisServer) -> redis.Redis:
        """A plain client of one node, as a standalone Redis's would be."""
        return redis.Redis(port=node.port, decode_responses=True)

    def close(self) -> None:
        for node in self.nodes:
            node.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A fresh cluster of three primaries and three replicas, stopped after the test."""
    made = LocalCluster(tmp_path / "cluster")
    try:
        made.start()
        yield made
    finally:
        made.close()
