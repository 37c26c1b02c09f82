"""How soon a work process asks a Redis that failed again: soon after a refusal, which costs next to
nothing (a dead primary, no primary named yet), so it finds a Sentinel's new primary within a quarter
second; ever later after a timeout, where each probe of a frozen server costs its timeout."""

from __future__ import annotations

import time

import pytest
import redis
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from django_jobs.worker.servers import MAX_BACKOFF, REFUSED_BACKOFF, Reach, Server


def reach() -> Reach:
    client = redis.Redis(port=1)  # never asked: a failure only schedules the next probe
    return Reach(Server(("default",), client, client))


@pytest.mark.parametrize(
    ("error", "longest"),
    [
        (ConnectionError("Connection refused"), REFUSED_BACKOFF),
        (TimeoutError("Timeout reading"), MAX_BACKOFF),
    ],
    ids=["refused", "timed out"],
)
def test_failures_push_the_next_probe_back_up_to_a_bound_of_their_kind(error: RedisError, longest: float):
    server = reach()
    waits = []
    for _ in range(8):
        before = time.monotonic()
        server.failed(error)
        waits.append(round(server.retry_at - before, 2))
    assert waits == sorted(waits) and waits[1] > waits[0]  # doubling ...
    assert waits[-1] == longest  # ... up to its bound


def test_a_refusal_after_timeouts_is_asked_again_soon():
    server = reach()
    for _ in range(8):
        server.failed(TimeoutError("Timeout reading"))
    server.failed(ConnectionError("Connection refused"))  # the server is gone, not frozen: it may be back
    server.failed(ConnectionError("Connection refused"))
    assert server.retry_at - time.monotonic() <= REFUSED_BACKOFF
