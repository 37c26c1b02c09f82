"""Every key a store script touches is one its caller passed in KEYS, so a script can run on a sharded
or clustered Redis; the only exceptions are the keys a script learns while it runs (the hash of a job
id it reads from a queue or a marker, a rate window, an alert group, the slots and line of a job's
limit key), as documented in each script's header."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_jobs.core import registry
from django_jobs.core.execution import settle_failure
from django_jobs.failures import alerts
from django_jobs.ops import inspection as inspect
from django_jobs.store import LEASES, CancelResult, Claimed, Finished, Settled, Store
from django_jobs.store.scripts import load
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

#: Keys a script may build while it runs: each is named in that script's header.
LEARNED = (
    "rq:job:",
    "djjobs:rate:",
    "djjobs:alert:",
    "djjobs:alertcount:",
    "djjobs:alertlast:",
)
#: ... and the slots and parked lines of a limit scope (a key value of a job with limit_key): their
#: names hold the key value, read from the job hash (MONITOR shows the newline in them as ``\n``).
SCOPED = ("djjobs:slots:", "djjobs:parked:")
#: Commands whose every argument is a key; every other command the scripts run has one key, first.
_ALL_KEYS = {"DEL", "EXISTS"}
_NO_KEYS = {"TIME"}


class Recorder:
    """MONITOR on this test's database: what each script was given in KEYS, and what it touched."""

    def __init__(self, client: redis.Redis) -> None:
        self.db = client.connection_pool.connection_kwargs.get("db", 0)
        self.client = client
        #: Ends the recording: unique, since a run in parallel on another database of the same server
        #: shows its own commands (and its own recorder's mark) to this MONITOR too.
        self.mark = f"store-keys-test-done-{uuid.uuid4().hex}"
        self.lines: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self._listen, daemon=True)

    def _listen(self) -> None:
        with self.client.monitor() as monitor:
            self.lines.append({"command": "started", "db": self.db, "client_type": ""})
            for line in monitor.listen():
                self.lines.append(line)
                if line["db"] == self.db and self.mark in line["command"]:
                    return

    def stray_keys(self) -> dict[str, set[str]]:
        """Per script (its KEYS count and first key), the keys it touched that were not in KEYS."""
        stray: dict[str, set[str]] = {}
        given: list[str] = []
        script = ""
        for line in (x for x in self.lines if x["db"] == self.db):
            words = line["command"].split(" ")
            if line["client_type"] != "lua":
                if words[0].upper() == "EVALSHA":
                    given = words[3 : 3 + int(words[2])]
                    script = " ".join(given[:1])
                continue
            name = words[0].upper()
            touched = [] if name in _NO_KEYS else words[1:] if name in _ALL_KEYS else words[1:2]
            for key in touched:
                learned = key.startswith(LEARNED) or (key.startswith(SCOPED) and "\\n" in key)
                if key not in given and not learned:
                    stray.setdefault(script, set()).add(key)
        return stray


@pytest.fixture
def recorder(redis_db: redis.Redis) -> Iterator[Recorder]:
    recorder = Recorder(redis.Redis(connection_pool=redis_db.connection_pool))
    recorder.thread.start()
    wait_for(lambda: recorder.lines)
    yield recorder
    if recorder.thread.is_alive():  # the test failed before it stopped listening
        _stop(recorder, redis_db)


def _stop(recorder: Recorder, client: redis.Redis) -> None:
    client.echo(recorder.mark)
    recorder.thread.join(10)
    assert not recorder.thread.is_alive()


def _every_transition(client: redis.Redis) -> None:
    """Drive each script at least once: push, claim, complete, fail, release, heartbeat, promote, bury,
    cancel (waiting, scheduled and running jobs, and the settling of a requested cancel), snooze, and
    a claim that drops an expired job."""
    jobs.debounced.options(unique_key="doc:1", debounce=0.01).enqueue("a")
    jobs.debounced.options(unique_key="doc:1", debounce=0.01).enqueue("b")
    jobs.record.options(unique_key="once").enqueue("c")
    jobs.limited.enqueue("d", 0)
    jobs.rated.enqueue("e")
    jobs.permanent.enqueue("f")
    jobs.record.enqueue_in(0.01, "g")
    jobs.always_fails.enqueue("i")
    jobs.fails_then_succeeds.options(priority=5).enqueue("j", 1)  # a prioritized retry, promoted
    jobs.record.options(priority=-5, delay=0.01).enqueue("k")
    jobs.snoozer.options(priority=2).enqueue("s", times=1, seconds=0.01)
    jobs.record.options(expires=0.01).enqueue("x")
    store = Store.of(client)
    wait_for(lambda: (store.next_due(["default"]) or 0) <= 0)
    run_jobs(["default"])
    handle = jobs.record.enqueue("h")
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="n", finished_ttl=60
    )
    assert claimed is not None and claimed.id == handle.id
    store.heartbeat([claimed.token], 30)
    store.release(claimed.token, claimed.queue, 60)
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="m", finished_ttl=60
    )
    assert claimed is not None
    store.complete(Finished(claimed.token, claimed.queue), 60)
    _cancel_transitions(store)
    _priority_transitions(store)
    _keyed_transitions(store)
    _pause_transitions(store)
    client.zadd(LEASES, {"gone:x": 0})
    store.maintain(["default"])
    store.lost_tokens()
    store.dying(0)


def _cancel_transitions(store: Store) -> None:
    waiting, later = jobs.record.enqueue("w"), jobs.record.enqueue_in(60, "l")
    running = jobs.record.enqueue("r")
    assert store.cancel(waiting.id, 60) is CancelResult.CANCELLED
    assert store.cancel(later.id, 60) is CancelResult.CANCELLED
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="c", finished_ttl=60
    )
    assert claimed is not None and claimed.id == running.id
    assert store.cancel(running.id, 60) is CancelResult.REQUESTED
    assert store.heartbeat([claimed.token], 30).cancelled == {claimed.token}
    assert store.release(claimed.token, claimed.queue, 60) is Settled.CANCELLED


def _keyed_transitions(store: Store) -> None:
    """Park, wake on a completion, a failure and a snooze, cancel a parked job, and maintenance's look
    at a line."""
    run_jobs(["default"])  # what the transitions before left queued
    first, *_ = [jobs.per_account.enqueue("A", key).id for key in ("a0", "a1", "a2", "a3", "a4")]
    claimed = _claim(store, "k0")
    assert claimed.id == first
    _, none, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="k1", finished_ttl=60,
        limits=registry.limits_json(),
    )  # fmt: skip
    assert none is None  # the others are parked
    completion = Finished(claimed.token, claimed.queue, scope=registry.limit_scope(claimed.record))
    woken = _claim(store, "k2", completion)
    settle_failure(store, woken, ConnectionError("upstream down"))
    snoozing = _claim(store, "k3")  # the next one, woken by that failure
    store.snooze(snoozing.token, snoozing.queue, 60, 60, registry.limit_scope(snoozing.record))
    last = store.connection.zrange("djjobs:parked:default\ntests.per_account\nA", -1, -1)[0]
    store.cancel(last.decode(), 60)
    store.connection.zadd("djjobs:parked:default", {"tests.per_account\nA": 0})
    store.maintain(["default"], registry.limits_json())


def _priority_transitions(store: Store) -> None:
    jobs.record.options(priority=3).enqueue("p")
    assert store.cancel(jobs.record.options(priority=-3).enqueue("q").id, 60) is CancelResult.CANCELLED
    claimed = _claim(store, "o")
    store.fail(claimed.token, claimed.queue, delay=0, fields={}, finished_ttl=60)  # head of its priority
    claimed = _claim(store, "p")
    assert store.release(claimed.token, claimed.queue, 60) is Settled.DONE
    inspect.servers(["default"])  # the read-only priority heads script


def _pause_transitions(store: Store) -> None:
    """Pause a type, park its jobs (one cancelled while parked), unpark the rest; pause a queue."""
    run_jobs(["default"])  # what the transitions before left queued
    store.pause("job", "tests.record", by="t", reason="")
    parked, doomed = jobs.record.options(priority=2).enqueue("s"), jobs.record.enqueue("t")
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=None, worker_name="w", lease_seconds=30, nonce="p", finished_ttl=60,
        limits=registry.limits_json(["tests.record"]),
    )  # fmt: skip
    assert claimed is None
    assert store.cancel(doomed.id, 60) is CancelResult.CANCELLED
    store.resume("job", "tests.record")
    moved, left = store.unpark("default", "tests.record")
    assert moved >= 1 and left == 0
    assert store.pause("queue", "default", by="t", reason="") is True
    assert store.held(store.record(parked.id))


def _claim(store: Store, nonce: str, finished: Finished | None = None) -> Claimed:
    _, claimed, _ = store.complete_and_claim(
        ["default"], finished=finished, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
        limits=registry.limits_json(),
    )  # fmt: skip
    assert claimed is not None
    return claimed


def test_every_key_a_store_script_touches_was_passed_in_keys(recorder, redis_db):
    _every_transition(redis_db)
    _stop(recorder, redis_db)
    ours = [x["command"] for x in recorder.lines if x["db"] == recorder.db]
    evalsha = [command.split(" ")[1] for command in ours if command.startswith("EVALSHA")]
    assert len(set(evalsha)) >= 11  # push, claim, fail, release, heartbeat, maintain, buried, due, cancel,
    # heads, snooze
    assert recorder.stray_keys() == {}


def test_the_alert_scripts_touch_only_their_keys(recorder, redis_db, settings):
    settings.JOBS = {**getattr(settings, "JOBS", {}), "ALERT_WINDOW": 1}
    jobs.permanent.enqueue("one")
    jobs.permanent.enqueue("two")
    run_jobs(["default"])
    wait_for(lambda: alerts.flush(redis_db))  # the second dead letter was only counted: its summary
    _stop(recorder, redis_db)
    assert recorder.stray_keys() == {}


@pytest.mark.parametrize("name", ["push", "complete_and_claim", "alert_gate", "alert_flush"])
def test_a_script_is_registered_once_per_connection(name: str, redis_db):
    loaded: Callable[[], object] = lambda: load(redis_db, name)  # noqa: E731
    assert loaded() is loaded()


def test_a_plain_claim_asks_nothing_of_the_pauses(recorder, redis_db):
    """With nothing paused a claim runs the same commands as before pausing existed: the paused hash is
    read once per run (once a second in a work process), never inside a claim."""
    for n in range(5):
        jobs.record.enqueue(f"plain-{n}")
    assert run_jobs(["default"]) == 5
    _stop(recorder, redis_db)
    ours = [line for line in recorder.lines if line["db"] == recorder.db]
    scripted = [line["command"] for line in ours if line["client_type"] == "lua"]
    assert scripted and not [c for c in scripted if "djjobs:paused" in c]
    direct = [line["command"] for line in ours if line["client_type"] != "lua"]
    reads = [c for c in direct if "djjobs:paused" in c and not c.startswith("EVALSHA")]
    assert reads == ["HGETALL djjobs:paused"]


def test_a_plain_claim_asks_no_priority_set_the_worker_found_empty(redis_db, recorder):
    """The cost of priorities (docs/reference/flow-control.md): while a queue's list has jobs and the
    worker's reading found no prioritized job, a claim runs no command for the priority sets."""
    jobs.record.enqueue_many([("a",), ("b",)])
    store = Store.of(redis_db)
    for nonce in ("1", "2"):
        _, claimed, _ = store.complete_and_claim(
            ["default"], finished=None, worker_name="w", lease_seconds=30, nonce=nonce, finished_ttl=60,
            prioritized=frozenset(),
        )  # fmt: skip
        assert claimed is not None
    _stop(recorder, redis_db)
    scripted = [
        line["command"].split(" ")[0].upper()
        for line in recorder.lines
        if line["db"] == recorder.db and line["client_type"] == "lua"
    ]
    assert scripted.count("LPOP") == 2 and "ZPOPMIN" not in scripted
