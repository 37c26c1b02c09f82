"""Redis connections for the queues named in django-rq's ``RQ_QUEUES``, read at access time."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings
from django_rq.connection_utils import get_redis_connection
from redis import Redis
from redis.exceptions import ResponseError
from rq.serializers import JSONSerializer, resolve_serializer

from django_jobs.conf import jobs_settings
from django_jobs.exceptions import ConfigurationError
from django_jobs.store import Store

_cache: dict[tuple[str, float | None], Redis] = {}
_lock = threading.Lock()


def queue_configs() -> dict[str, dict[str, Any]]:
    queues = getattr(settings, "RQ_QUEUES", None)
    return queues if isinstance(queues, dict) else {}


def serializer_problem(config: Any) -> str | None:
    """Why django-rq would not decode this queue's jobs with JSON (it reads only the queue's key)."""
    serializer = config.get("SERIALIZER") if isinstance(config, dict) else None
    try:
        resolved = resolve_serializer(serializer)
    except Exception as exc:
        return f"SERIALIZER {serializer!r} cannot be loaded ({exc})"
    if isinstance(resolved, type) and issubclass(resolved, JSONSerializer):
        return None
    return f"SERIALIZER is {serializer or 'unset'}, so pickle"


def queue_config(queue: str) -> dict[str, Any]:
    try:
        return queue_configs()[queue]
    except KeyError:
        raise ConfigurationError(
            f"Queue {queue!r} is not in settings.RQ_QUEUES (known: {sorted(queue_configs()) or 'none'})."
        ) from None


def connection_identity(queue: str) -> str:
    """Queues with the same identity share one Redis connection (and one runjobs can serve them)."""
    config = queue_config(queue)
    return json.dumps(
        {k: v for k, v in config.items() if k not in ("DEFAULT_TIMEOUT", "SERIALIZER", "ASYNC")},
        sort_keys=True,
        default=str,
    )


def by_server(queues: Sequence[str]) -> list[list[str]]:
    """``queues`` grouped by the Redis server that holds them: the servers in the order of their first
    queue, each one's queues in the order given."""
    grouped: dict[str, list[str]] = {}
    for queue in queues:
        grouped.setdefault(connection_identity(queue), []).append(queue)
    return list(grouped.values())


def server_connections(queues: Sequence[str]) -> list[tuple[list[str], Redis]]:
    """``queues`` grouped by the Redis server they live on, each group with the web side's client:
    for what a server answers as a whole (its eviction policy, its cluster mode)."""
    return [(names, get_connection(names[0])) for names in by_server(queues)]


def server_stores(queues: Sequence[str]) -> list[tuple[list[str], Store]]:
    """``queues`` grouped by where they live, each group with its store: for reading or changing
    their jobs and pauses."""
    return [(names, store_of(names[0])) for names in by_server(queues)]


def queues_on(queue: str) -> list[str]:
    """Every queue of ``RQ_QUEUES`` on the Redis server of ``queue``; an entry that is not a dict (the
    checks report it) is on none."""
    identity = connection_identity(queue)
    return [
        name
        for name, config in queue_configs().items()
        if isinstance(config, dict) and connection_identity(name) == identity
    ]


def get_connection(queue: str, socket_timeout: float | None = None) -> Redis:
    """A cached client for ``queue``. The web side passes no timeout and gets JOBS' short one."""
    timeout = jobs_settings.REDIS_SOCKET_TIMEOUT if socket_timeout is None else socket_timeout
    key = (connection_identity(queue), timeout)
    with _lock:
        client = _cache.get(key)
        if client is None:
            client = get_redis_connection(queue_config(queue))
            kwargs = client.connection_pool.connection_kwargs
            kwargs["socket_timeout"] = timeout
            kwargs["socket_connect_timeout"] = min(timeout, 5.0)
            kwargs["health_check_interval"] = 30
            _cache[key] = client
        return client


def home(queue: str) -> Redis:
    """The web side's client of ``queue``'s Redis; for a queue missing from ``RQ_QUEUES`` (one read
    back from a garbage job hash), the first queue's."""
    configs = queue_configs()
    if not configs:
        raise ConfigurationError("settings.RQ_QUEUES is empty")
    return get_connection(queue if queue in configs else next(iter(configs)))


def store_of(queue: str) -> Store:
    """The store of ``queue``'s jobs: the one place that says where a queue's transitions run."""
    return Store.of(get_connection(queue))


def stores(queue: str | None = None) -> Iterator[Store]:
    """The store of ``queue`` or, without a queue, one per place the configured queues live: where
    to look for a job known only by its id."""
    if queue is not None:
        yield store_of(queue)
        return
    for names in by_server(list(queue_configs())):
        yield store_of(names[0])


def cluster_mode(connection: Redis) -> bool:
    """Whether the server runs as a Redis Cluster node (``INFO cluster``): RQ's keys cannot live there,
    since every transition touches a queue's keys and job hashes that hash to different slots. A
    server that forbids ``INFO`` (an ACL) is taken for a standalone one; it raises only if it does
    not answer."""
    try:
        return bool(connection.info("cluster").get("cluster_enabled"))
    except ResponseError:
        return False
