"""What Redis replication promises, asked of the server: pushes confirmed by replicas (``WAIT``),
and which server is the primary now, so a failover is seen and the ledger reconciled.

Redis acknowledges a write before any replica has it; a failover to a replica that lagged loses
what the old primary acknowledged last. ``WAIT`` makes the push's own connection block until N
replicas acknowledged every write it sent (or a timeout passes), so it must ride in the push's
pipeline, on the same connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from redis.client import Pipeline
from redis.exceptions import NoScriptError

from django_jobs.store.machine import Store
from django_jobs.store.model import Pushable
from django_jobs.store.push import push_calls
from django_jobs.store.record import text
from django_jobs.store.scripts import load


@dataclass(frozen=True)
class Confirmed:
    """A push's outcome: ids not pushed (already there, duplicates) and replicas that confirmed it."""

    seen: set[str]
    replicas: int


def push_confirmed(store: Store, jobs: Iterable[Pushable], replicas: int, timeout: float) -> Confirmed:
    """Push ``jobs`` and wait up to ``timeout`` seconds for ``replicas`` replicas, in one round trip."""
    calls = push_calls(store.keys, list(jobs))
    if not calls:
        return Confirmed(set(), replicas)
    script = load(store.connection, "push")
    for retry in (True, False):
        with store.connection.pipeline(transaction=False) as pipe:
            for call_keys, call_args in calls:
                pipe.evalsha(script.sha, len(call_keys), *call_keys, *call_args)
            _wait(store, pipe, replicas, timeout)
            try:
                *results, _, acked = pipe.execute()
            except NoScriptError:  # a new primary (failover, restart) that has not seen the script
                if not retry:
                    raise
                store.connection.script_load(script.script)
                continue
        return Confirmed({text(x) for result in results for x in result}, int(acked))
    raise AssertionError("unreachable")


def _wait(store: Store, pipe: Pipeline, replicas: int, timeout: float) -> None:
    """Queue ``WAIT`` for ``replicas`` replicas. A push of a job already there writes nothing, and WAIT
    waits only for this connection's last write: the mark's bump makes it cover everything the primary
    has acknowledged so far."""
    pipe.incr(store.keys.replication_mark)
    pipe.wait(replicas, max(1, int(timeout * 1000)))


def confirm(store: Store, replicas: int, timeout: float) -> int:
    """How many replicas (up to ``replicas``, waiting at most ``timeout`` s) have every write the primary
    acknowledged before this call: the relay's check of pushes it made earlier, in one round trip."""
    with store.connection.pipeline(transaction=False) as pipe:
        _wait(store, pipe, replicas, timeout)
        _, acked = pipe.execute()
    return int(acked)


@dataclass(frozen=True)
class Primary:
    """The server a connection writes to: who it is and how far behind its replicas are."""

    run_id: str
    replid: str
    role: str
    replicas: int  # connected replicas
    lag: float | None  # seconds since the slowest replica last acknowledged (None: no replica)
    changed_at: float | None = None  # Redis time of the last primary change seen (None: never)
    recorded: bool = True  # whether the server holds a primary's identity (no: new, or it lost its data)


def read_primary(store: Store) -> Primary:
    """The server's identity and replication state, from ``INFO`` (one round trip)."""
    with store.home().pipeline(transaction=False) as pipe:
        pipe.info("server")
        pipe.info("replication")
        pipe.hmget(store.keys.primary, "changed_at", "run_id")
        server, replication, (changed_at, recorded) = pipe.execute()
    lags = [
        float(value.get("lag", 0))
        for name, value in replication.items()
        if name.startswith("slave") and isinstance(value, dict) and value.get("state") == "online"
    ]
    return Primary(
        run_id=str(server.get("run_id", "")),
        replid=str(replication.get("master_replid", "")),
        role=str(replication.get("role", "")),
        replicas=len(lags),
        lag=max(lags) if lags else None,
        changed_at=float(changed_at) if changed_at else None,
        recorded=recorded is not None,
    )


def note_primary(store: Store, primary: Primary) -> tuple[bool, float | None]:
    """Record ``primary`` as the server's identity; True if it differs from the one last recorded
    there (a failover or a restart happened since), and when the last change was recorded."""
    changed, changed_at = load(store.connection, "primary")(
        keys=[store.keys.primary], args=[primary.run_id, primary.replid]
    )
    return bool(changed), float(changed_at) if changed_at else None
