"""The lifecycle's transitions, each run once through one store: what the keyspace and cluster tests
drive, to see where every key they write lands."""

from __future__ import annotations

from django_jobs.client.enqueue import build
from django_jobs.core import registry
from django_jobs.core.envelope import Options
from django_jobs.store import Finished, Store, lifecycle
from django_jobs.store.browse import Listing, page
from django_jobs.store.lifecycle import State
from django_jobs.store.read import where
from django_jobs.store.replication import note_primary, push_confirmed, read_primary


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
