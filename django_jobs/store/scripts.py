"""The store's Lua scripts: their interfaces (declared once, see :mod:`.interface`), the gates of the
claim, the names substituted into their text, and their registration per connection.

Every key a script touches is passed in KEYS (the few exceptions, keys known only once the script
reads them, are documented in the script's header and live on the same server). The statuses, the
hash fields and the modes come from the enums here and in :mod:`.record`, substituted into the text
when it loads: a script spells none of them.
"""

from __future__ import annotations

import enum
import functools
import string
import weakref
from importlib import resources
from typing import Any

import hiredis
from redis import Redis
from redis.client import Pipeline
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import ConnectionError, NoScriptError, TimeoutError

from django_jobs.store.interface import Group, Interface, Times
from django_jobs.store.keys import Keyspace, QueueKeys
from django_jobs.store.lifecycle import GATES, F, State, Status

#: The scores of one priority in a queue's priority sets (``lua/ready.lua``): 201 bands of 2^44 stay
#: below 2^52, so every score is an exact integer in a double.
PRIORITY_BAND = 2**44


class Ending(enum.StrEnum):
    """How the fail script ends an attempt (``${END_<NAME>}``)."""

    CANCEL = "cancel"  # cancelled: it never runs again
    DEAD = "dead"  # to the dying set, until its dead letter is written
    REQUEUE = "requeue"  # back at the head of its priority now (its worker died: no backoff)
    RETRY = "retry"  # scheduled after its delay


#: The keys of one queue, in this order, wherever a script is given a queue (``<group>.list`` ...):
#: the lifecycle's one per-queue layout.
QUEUE = QueueKeys._fields


#: A scope of a limit key (``lua/fair.lua``): its slots and its line in the job's queue, and its
#: limits as ``next_turn`` reads them (``Scope.arg``).
SCOPE = Group("scope", Times.MAYBE, keys=("slots", "line", "paused"), args=("limits",))


class Stop(enum.StrEnum):
    """What a gate of the claim (:data:`.lifecycle.GATES`) did to a job it stopped, as the claim
    counts it (``${STOP_<NAME>}``): a batch of stopped jobs ends a claim, the caller claims again."""

    DROPPED = "dropped"  # ended, never run
    PARKED = "parked"  # in its paused type's parked list, until a resume
    DEFERRED = "deferred"  # waits: in its key's line, or scheduled until its limit has room


#: The stop of each state a gate may leave a job in.
STOP_OF = {
    State.EXPIRED: Stop.DROPPED,
    State.PARKED: Stop.PARKED,
    State.IN_LINE: Stop.DEFERRED,
    State.SCHEDULED: Stop.DEFERRED,
}

_ONE_QUEUE = Group("queue", Times.ONE, keys=QUEUE)

#: Every script's interface, by name.
INTERFACES = {
    i.name: i
    for i in (
        Interface(
            "push",
            keys=("queues_set",),
            args=("jobs", "wake_cap", "unique_ttl", "prefix", "sched_prefix"),
            groups=(
                Group("queue", Times.MANY, keys=QUEUE),
                Group("job", Times.MANY, keys=("hash",)),
                Group("marker", Times.MANY, keys=("key",)),
            ),
        ),
        Interface(
            "complete_and_claim",
            keys=("leases", "dying", "vanished", "lost", "paused", "parked_lists"),
            args=(
                "stamp",
                "finished_ttl",
                "worker",
                "lease_seconds",
                "nonce",
                "limits",
                "backoff",
                "prefix",
                "recheck",
                "want",
            ),
            groups=(
                Group("queue", Times.MANY, keys=QUEUE, args=("name", "prioritized")),
                Group("limited", Times.MANY, keys=("key",)),
                Group("done", Times.MAYBE, keys=("hash", "wip"), args=("token", "result")),
                # a batch's other completions, without a scope
                Group("also", Times.MANY, keys=("hash", "wip"), args=("token", "result")),
                Group("done_queue", Times.MAYBE, keys=QUEUE),  # with scope only: where its next job goes
                SCOPE,
            ),
        ),
        Interface(
            "fail",
            keys=("held", "leases", "lost", "dying", "hash"),
            args=("token", "mode", "delay", "stamp", "finished_ttl"),
            groups=(_ONE_QUEUE, SCOPE),
            rest="fields",
        ),
        Interface(
            "release",
            keys=("leases", "lost", "hash"),
            args=("token", "stamp", "finished_ttl"),
            groups=(_ONE_QUEUE, SCOPE),
        ),
        Interface(
            "snooze",
            keys=("leases", "lost", "hash"),
            args=("token", "seconds", "stamp", "finished_ttl"),
            groups=(_ONE_QUEUE, SCOPE),
        ),
        Interface(
            "heartbeat",
            keys=("leases",),
            args=("lease_seconds",),
            groups=(Group("beat", Times.MANY, keys=("hash",), args=("token",)),),
        ),
        Interface(
            "maintain",
            keys=("leases", "lost", "dying", "queues_set", "paused"),
            args=("batch", "stamp", "prefix", "keyed", "recheck", "hold"),
            groups=(Group("queue", Times.MANY, keys=QUEUE),),
        ),
        Interface(
            "cancel",
            keys=("hash",),
            args=("id", "stamp", "finished_ttl", "parked_as", "line_as"),
            groups=(
                _ONE_QUEUE,
                Group("parked", Times.MAYBE, keys=("list",)),
                Group("line", Times.MAYBE, keys=("line", "slots")),
            ),
        ),
        Interface("run_now", keys=("hash", "queues_set"), args=("id", "stamp"), groups=(_ONE_QUEUE,)),
        Interface(
            "unpark",
            keys=("paused", "parked_lists", "parked", "queues_set"),
            args=("field", "batch", "prefix", "queue_name", "name"),
            groups=(_ONE_QUEUE,),
        ),
        Interface("pause", keys=("paused",), args=("field", "by", "reason")),
        Interface(
            "buried",
            keys=("holder", "hash"),
            args=("member", "ttl"),
            groups=(Group("wip", Times.MAYBE, keys=("key",)),),
        ),
        Interface("due", keys=("set",), args=("older_than", "limit")),
        Interface(
            "reclaim",
            keys=("registry", "hash", "dying"),
            args=("id", "data", "reason", "exception", "message"),
        ),
        Interface("defer", keys=("set",), args=("member", "seconds")),
        Interface("move_aside", keys=("key", "moved"), args=("kind",)),
        Interface("statuses", groups=(Group("job", Times.MANY, keys=("hash",)),)),
        Interface("parked", args=("most",)),
        # Called by position from outside the store (alerts, replication): their order is theirs.
        Interface(
            "alert_gate",
            keys=("window", "count", "last", "due"),
            args=("seconds", "pk", "fingerprint", "keep"),
        ),
        Interface(
            "alert_flush",
            keys=("due",),
            args=("seconds", "batch", "window_prefix", "count_prefix", "last_prefix"),
        ),
        Interface("primary", keys=("primary",), args=("run_id", "replid")),
    )
}


def _file(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


def _names() -> dict[str, Any]:
    """What ``${NAME}`` stands for in every script: statuses, fields, endings, stops, the band."""
    names: dict[str, Any] = {s.name: s.value for s in Status}
    names |= {f"F_{name}": value for name, value in vars(F).items() if name.isupper()}
    names |= {f"END_{e.name}": e.value for e in Ending}
    names |= {f"STOP_{s.name}": s.value for s in Stop}
    return names | {"BAND": PRIORITY_BAND}


def _lua(name: str, **snippets: str) -> str:
    return string.Template(_file(name)).substitute(_names(), **snippets)


def gates_text() -> str:
    """The claim's gates as Lua: a function per gate of :data:`.lifecycle.GATES` (the body of
    ``lua/gates/<name>.lua``), then the list of them in order."""
    bodies = [
        f"-- gate {g.name}: {g.doc}\nlocal function gate_{g.name}(job)\n{_lua('gates/' + g.name)}end\n"
        for g in GATES
    ]
    return "".join(bodies) + f"local gates = {{{', '.join(f'gate_{g.name}' for g in GATES)}}}\n"


@functools.cache
def script_text(name: str) -> str:
    """The text of ``lua/<name>.lua``: its interface's prologue (if declared), then the file with its
    snippets and names filled in.

    The files are :class:`string.Template` text: ``${NOW}`` (the Redis-time prologue), ``${READY}``
    (where a ready id goes), ``${FAIR}`` (limits per key: park, wake), ``${FAIR_MADE}`` (both, made
    by the first call of ``fair()``), ``${GATES}`` (the claim's gates), ``${BAND}``, ``${QUEUED}``...,
    ``${F_ATTEMPT}``..., ``${END_DEAD}``..., and ``$$`` for a ``$``.
    """
    interface = INTERFACES.get(name)
    prologue = interface.prologue() if interface else ""
    snippets = {"NOW": _lua("now"), "READY": _lua("ready"), "FAIR": _lua("fair")}
    snippets["FAIR_MADE"] = _lua("fair_made", READY=snippets["READY"], FAIR=snippets["FAIR"])
    if "${GATES}" in _file(name):
        snippets["GATES"] = gates_text()
    return prologue + _lua(name, **snippets)


class _Script(Script):
    """A script called on its own connection as one ``EVALSHA``, packed by hiredis and sent on a
    connection of the client's pool: redis-py's ``Script.__call__`` and ``execute_command`` check
    classes, encode each argument and record observability data on every call, about 13 us of a
    claim's 44. A connection that fails is dropped and the call made again the client's own way (its
    retry policy and errors, as before); a server without the script (restarted, flushed) gets it
    loaded and the call is made again, as there; a call in a pipeline is redis-py's own."""

    def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        if client is not None:
            return super().__call__(keys, args, client)
        call_keys, call_args = keys or [], args or []
        connection = self.registered_client
        if not isinstance(connection, Redis):  # a cluster client: redis-py's own call
            return super().__call__(keys, args)
        try:
            return _evalsha(connection, ("EVALSHA", self.sha, len(call_keys), *call_keys, *call_args))
        except NoScriptError:
            self.sha = connection.script_load(self.script)
            return connection.evalsha(self.sha, len(call_keys), *call_keys, *call_args)


def _evalsha(client: Redis, command: tuple[Any, ...]) -> Any:
    """Send ``command`` on a connection of ``client``'s pool and read its reply; on a failure of the
    connection (not a reply that is an error), send it again through ``client``, which retries as
    it is configured to."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command([hiredis.pack_command(command)])  # type: ignore[no-untyped-call]
        return connection.read_response()
    except (ConnectionError, TimeoutError, OSError):
        connection.disconnect()  # type: ignore[no-untyped-call]
        return client.execute_command(*command)  # type: ignore[no-untyped-call]
    finally:
        pool.release(connection)


def load(connection: Redis, name: str) -> Script:
    """The script ``name`` bound to ``connection``, registered once per connection."""
    scripts = _scripts.setdefault(connection, {})
    script = scripts.get(name)
    if script is None:
        script = scripts[name] = _Script(connection, script_text(name))
    return script


_scripts: weakref.WeakKeyDictionary[Redis, dict[str, Script]] = weakref.WeakKeyDictionary()


class Bound:
    """A script on one connection, called by the names of its interface."""

    def __init__(self, connection: Redis, interface: Interface) -> None:
        self.script = load(connection, interface.name)
        self.interface = interface

    def __call__(self, client: Pipeline | None = None, **named: Any) -> Any:
        call_keys, call_args = self.interface.pack(**named)
        return self.script(keys=call_keys, args=call_args, client=client)


class Scripts:
    """Every declared script of one connection: ``scripts.fail(token=..., ...)``."""

    def __init__(self, connection: Redis) -> None:
        # attributes, so that the claim's lookup is a plain one: __getattr__ only names a wrong one
        self.__dict__.update({name: Bound(connection, interface) for name, interface in INTERFACES.items()})

    def __getattr__(self, name: str) -> Bound:
        raise AttributeError(f"no store script {name!r}")


class Part:
    """What each part of :class:`~.machine.Store` works with: its connection, its keyspace (every key
    it names), and its scripts."""

    connection: Redis
    keys: Keyspace
    scripts: Scripts

    def home(self) -> Redis:
        """A client of the server that holds this namespace, for what only a server answers (its
        INFO, TIME, a SCAN of its keys): the connection itself, or on a Redis Cluster the primary that
        owns the namespace's hash slot now (looked up each time: a failover or a reshard moves it)."""
        connection = self.connection
        if isinstance(connection, RedisCluster):
            return connection.get_redis_connection(connection.get_node_from_key(self.keys.leases))
        return connection
