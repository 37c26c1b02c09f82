"""Dramatiq (Redis broker): ``noop`` and ``wait`` actors, no retries."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks import stamp

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_PEER_BROKER"]))


@dramatiq.actor(max_retries=0)
def noop(n: int, path: str) -> None:
    stamp.noop(n, path)


@dramatiq.actor(max_retries=0)
def wait(n: int, path: str) -> None:
    stamp.wait(n, path)
