"""Each gate of the claim (``lifecycle.GATES``) stops the job it is for, and leaves it in the state its
row names, as the read model finds it; a job that every gate lets pass is leased."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from django_jobs.core import registry
from django_jobs.store import Store, lifecycle, read
from django_jobs.store.lifecycle import State
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _claim(store: Store, nonce: str, paused: tuple[str, ...] = ()) -> str | None:
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(paused),
    )  # fmt: skip
    return claimed.id if claimed else None


def _expired(store: Store) -> tuple[str, tuple[str, ...]]:
    job_id = jobs.record.options(expires=0.01).enqueue("x").id
    time.sleep(0.05)
    return job_id, ()


def _paused(store: Store) -> tuple[str, tuple[str, ...]]:
    store.pause("job", "tests.record", by="t", reason="")
    return jobs.record.enqueue("p").id, ("tests.record",)


def _behind_its_key(store: Store) -> tuple[str, tuple[str, ...]]:
    jobs.per_account.enqueue("A", "first")
    assert _claim(store, "holder") is not None  # A's one slot is taken
    return jobs.per_account.enqueue("A", "second").id, ()


def _at_its_types_limit(store: Store) -> tuple[str, tuple[str, ...]]:
    for n in range(3):
        jobs.limited.enqueue(f"l{n}", 0)
        assert _claim(store, f"l{n}") is not None
    return jobs.limited.enqueue("over", 0).id, ()


def _over_its_rate(store: Store) -> tuple[str, tuple[str, ...]]:
    for n in range(5):
        jobs.rated.enqueue(f"r{n}")
        assert _claim(store, f"r{n}") is not None
    return jobs.rated.enqueue("over").id, ()


SETUPS: dict[str, Callable[[Store], tuple[str, tuple[str, ...]]]] = {
    "expiry": _expired,
    "pause": _paused,
    "line": _behind_its_key,
    "concurrency": _at_its_types_limit,
    "rate": _over_its_rate,
}


def test_every_gate_has_a_case_here():
    assert set(SETUPS) == {gate.name for gate in lifecycle.GATES}


@pytest.mark.parametrize("gate", lifecycle.GATES, ids=lambda gate: gate.name)
def test_a_job_a_gate_stops_is_in_a_state_its_row_names(gate, redis_db):
    store = Store.of(redis_db)
    job_id, paused = SETUPS[gate.name](store)
    assert _claim(store, "stopped", paused) is None
    assert read.where(Store.of(redis_db), job_id).state in gate.stops


def test_a_job_every_gate_lets_pass_is_leased(redis_db):
    store = Store.of(redis_db)
    job_id = jobs.limited.options(expires=60).enqueue("plain", 0).id
    assert _claim(store, "n") == job_id
    assert read.where(Store.of(redis_db), job_id).state is State.RUNNING
