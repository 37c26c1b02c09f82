"""The claim: complete the previous job and lease the next one, in one script whose gates
(``lua/gates/``, :data:`.scripts.GATES`) decide what a popped job may do; and the heartbeat that
keeps leases alive."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any, NotRequired, TypedDict, Unpack

from django_jobs.store import keys
from django_jobs.store.interface import Packer
from django_jobs.store.keys import Keyspace
from django_jobs.store.lifecycle import F
from django_jobs.store.model import PARK_RECHECK, Batch, Beat, Claim, Claimed, Finished
from django_jobs.store.record import JobRecord, int_field, rq_timestamp, split_token, text
from django_jobs.store.scripts import INTERFACES, Part


def _pairs(flat: Sequence[Any]) -> dict[str, bytes]:
    return {
        k.decode() if isinstance(k, bytes) else str(k): v for k, v in zip(flat[::2], flat[1::2], strict=False)
    }


def _expired(queues: Sequence[str], flat: Sequence[Any] | None) -> tuple[Claimed, ...]:
    """The jobs a claim dropped because they expired: its reply's (queue number, id, fields) triples."""
    if not flat:
        return ()  # the plain path: nothing expired, and the script said so with a nil
    return tuple(
        Claimed(queues[int(number) - 1], text(job_id), "", JobRecord(text(job_id), _pairs(fields)))
        for number, job_id, fields in zip(flat[::3], flat[1::3], flat[2::3], strict=True)
    )


def limit_entries(
    space: Keyspace, limits: str, limited: list[str], queues: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """The limits of the claim script (see its header), by name, from ``registry.limits_json()``:
    a type's slots and, while it is paused, its parked lists (one per queue of ``queues``) are
    appended to ``limited`` once per canonical name, and named by their number there."""
    slots: dict[str, int] = {}
    parked: dict[str, int] = {}
    entries = {}
    for name, (concurrency, count, period, canonical, *flags) in json.loads(limits).items():
        keyed, paused = flags[:1] == [True], flags[1:2] == [True]
        if concurrency > 0 and not keyed and canonical not in slots:
            limited.append(space.slots(canonical))
            slots[canonical] = len(limited)
        if paused and canonical not in parked:
            parked[canonical] = len(limited) + 1
            limited += [space.parked(queue, canonical) for queue in queues]
        entry: dict[str, Any] = {"concurrency": concurrency, "rate": count, "period": period}
        if keyed:
            entry |= {"slots": 0, "rate_prefix": space.rates_prefix, "slots_prefix": space.slots_prefix}
            entry["scope"] = keys.limit_scope(canonical, "")
        else:
            entry |= {"slots": slots.get(canonical, 0), "rate_prefix": space.rate_prefix(canonical)}
        if paused:
            entry |= {"paused_field": keys.pause_field("job", canonical), "parked": parked[canonical]}
            entry["canonical"] = canonical
        entries[name] = entry
    return entries


@functools.lru_cache(maxsize=64)
def _claim_packer(
    space: Keyspace, queues: tuple[str, ...], limits: str, prioritized: str, backoff: float
) -> Packer:
    """The packer of the claims from these queues with these limits, prioritized queues ('1' per
    queue whose high set may hold jobs) and backoff: everything but the per-claim names packed.

    Worked out once per worker and set of pauses (they do not change between claims), so a claim
    costs no more than filling in its stamp, worker, lease and the job it completes.
    """
    items = [
        {**space.queue_keys(queue), "name": queue, "prioritized": flag}
        for queue, flag in zip(queues, prioritized, strict=True)
    ]
    limited: list[str] = []
    entries = limit_entries(space, limits, limited, queues)
    return INTERFACES["complete_and_claim"].packer(
        leases=space.leases, dying=space.dying, vanished=space.vanished, lost=space.lost,
        paused=space.paused, parked_lists=space.parked_lists, limits=json.dumps(entries) if entries else "{}",
        backoff=backoff, prefix=space.job_prefix, recheck=PARK_RECHECK, queue=items, limited=limited,
    )  # fmt: skip


class ClaimOptions(TypedDict):
    """What a single claim takes besides its queues and completion (:meth:`Claiming.claim_batch`)."""

    worker_name: str
    lease_seconds: float
    nonce: str
    finished_ttl: int
    limits: NotRequired[str]
    limit_wait: NotRequired[float]
    prioritized: NotRequired[Collection[str] | None]


class Claiming(Part):
    """The claim, the completion it carries, and the heartbeat of the leases it gives."""

    def complete_and_claim(
        self, queues: Sequence[str], *, finished: Finished | None, **options: Unpack[ClaimOptions]
    ) -> Claim:
        """Complete ``finished`` if given, then claim the next job, in one round trip; ``options`` are
        :meth:`claim_batch`'s (:class:`ClaimOptions`).

        ``limits`` is the JSON of ``registry.limits_json``; a job over its limit is deferred, not
        claimed, and one that expired before it started is dropped, never run (:attr:`Claim.expired`).
        ``prioritized``: the queues whose high-priority set may hold jobs (:meth:`claim_state`; None:
        all); another queue's is asked only once its list is empty, which spares a plain claim a command.
        """
        batch = self.claim_batch(queues, finished=finished, **options)
        return Claim(batch.finished > 0, batch.leased[0] if batch.leased else None, batch.expired)

    def claim_batch(
        self,
        queues: Sequence[str],
        *,
        finished: Finished | None,
        worker_name: str,
        lease_seconds: float,
        nonce: str,
        finished_ttl: int,
        limits: str = "{}",
        limit_wait: float = 0.5,
        prioritized: Collection[str] | None = None,
        want: int = 1,
        also: Sequence[Finished] = (),
    ) -> Batch:
        """:meth:`complete_and_claim` of up to ``want`` jobs, completing ``also`` too (completions
        without a key's scope): what as many claims one after another would lease, in one round trip.
        A batch ends early after a job of a ``limit_key``, so the next claim completes one scope."""
        high = "".join("1" if prioritized is None or q in prioritized else "0" for q in queues)
        pack = _claim_packer(self.keys, tuple(queues), limits, high, limit_wait)
        stamp = rq_timestamp(dt.datetime.now(dt.UTC))
        script = self.scripts.complete_and_claim.script
        done, done_queue, scope = _done(self.keys, finished)
        call = pack(
            stamp=stamp, finished_ttl=finished_ttl, worker=worker_name, lease_seconds=lease_seconds,
            nonce=nonce, want=want, done=done, done_queue=done_queue, scope=scope,
            also=[_plain(self.keys, one) for one in also],
        )  # fmt: skip
        reply = script(*call)
        ok, expired = int(reply[0]), _expired(queues, reply[1])
        while len(reply) == 3:  # it deferred, parked or dropped a batch of jobs: look behind them
            call = pack(
                stamp=stamp, finished_ttl=finished_ttl, worker=worker_name, lease_seconds=lease_seconds,
                nonce=nonce, want=want, done=None, done_queue=None, scope=None, also=[],
            )  # fmt: skip
            reply = script(*call)
            expired += _expired(queues, reply[1])
        leased = tuple(_leased(queues, worker_name, reply[i : i + 4]) for i in range(2, len(reply), 4))
        return Batch(ok, leased, expired)

    def complete(self, finished: Finished, finished_ttl: int) -> bool:
        """Mark one attempt finished, claiming nothing (the hot path completes inside the next claim)."""
        return self.complete_and_claim(
            [], finished=finished, worker_name="", lease_seconds=0, nonce="", finished_ttl=finished_ttl
        ).completed

    def heartbeat(self, tokens: Sequence[str], lease_seconds: float) -> Beat:
        """Extend these leases; returns the tokens that no longer hold one, and those asked to stop."""
        if not tokens:
            return Beat(set(), set())
        beats = [{"hash": self.keys.job(split_token(token)), "token": token} for token in tokens]
        call = _heartbeat_packer(self.keys)(lease_seconds=lease_seconds, beat=beats)
        gone, cancelled = self.scripts.heartbeat.script(*call)
        return Beat({text(t) for t in gone}, {text(t) for t in cancelled})


@functools.cache
def _heartbeat_packer(space: Keyspace) -> Packer:
    """The heartbeat's packer: the leases packed once."""
    return INTERFACES["heartbeat"].packer(leases=space.leases)


_Done = tuple[dict[str, Any] | None, dict[str, str] | None, dict[str, str] | None]


def _leased(queues: Sequence[str], worker_name: str, item: Sequence[Any]) -> Claimed:
    """One job a claim leased, from its reply's (queue number, id, token, fields)."""
    number, job_id, token_b, flat = item
    fields = _pairs(flat)
    fields[F.ATTEMPT] = str(int_field(fields, F.ATTEMPT, 0) + 1).encode()  # as the script counted
    record = JobRecord(job_id.decode(), fields)
    return Claimed(queues[int(number) - 1], record.id, token_b.decode(), record, worker_name)


def _plain(space: Keyspace, finished: Finished) -> dict[str, Any]:
    """One of a claim's ``also`` completions: its hash, wip set, token and result."""
    if finished.scope is not None:
        raise ValueError(f"job {finished.token} has a key's scope: complete it as the claim's first")
    return {
        "hash": space.job(split_token(finished.token)),
        "wip": space.queue_keys(finished.queue)["wip"],
        "token": finished.token,
        "result": finished.result or "",
    }


def _done(space: Keyspace, finished: Finished | None) -> _Done:
    """The claim's done, done_queue and scope: the job it completes (its hash, wip set, token and
    result), and for a job of a key (limit_key) its queue and its scope, where its next job comes from."""
    if finished is None:
        return None, None, None
    done = _plain(space, replace(finished, scope=None))
    if finished.scope is None:
        return done, None, None
    return done, space.queue_keys(finished.queue), finished.scope.places(finished.queue, space)
