"""What a Redis server does when it is full. Anything but ``noeviction`` (with ``maxmemory`` set)
lets Redis delete keys to make room, a queued job's hash or a whole queue among them, and such a
job vanishes without having run. ``runjobs``, ``jobs_health`` and the system checks all ask here."""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis
from redis.exceptions import ResponseError

from django_jobs.telemetry.logs import server_name


@dataclass(frozen=True)
class EvictionPolicy:
    """A server's ``maxmemory-policy`` and ``maxmemory``, as far as ``CONFIG GET`` tells."""

    server: str
    policy: str | None  # None: it could not be read (managed services often rename CONFIG)
    maxmemory: int = 0
    error: str = ""

    @property
    def unknown(self) -> bool:
        return self.policy is None

    @property
    def evicts(self) -> bool:
        return self.policy not in (None, "noeviction") and self.maxmemory > 0

    def describe(self) -> str:
        """One line: what was found and, if it is a risk, what to change."""
        if self.policy is None:
            return (
                f"Could not read the maxmemory-policy of Redis {self.server} ({self.error}): make sure "
                "it is noeviction, or a full Redis may evict queued jobs."
            )
        if self.evicts:
            return (
                f"Redis {self.server} evicts keys when full (maxmemory {self.maxmemory}, maxmemory-policy "
                f"{self.policy}), so queued jobs can vanish: set maxmemory-policy to noeviction."
            )
        limit = f"maxmemory {self.maxmemory}" if self.maxmemory else "no maxmemory"
        return f"Redis {self.server}: maxmemory-policy {self.policy}, {limit}"


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def eviction_policy(connection: Redis) -> EvictionPolicy:
    """Read the policy; raises RedisError only if Redis does not answer at all."""
    server = server_name(connection)
    try:
        raw = connection.config_get("maxmemory*")
    except ResponseError as exc:  # CONFIG renamed or forbidden (ACL)
        return EvictionPolicy(server, None, error=" ".join(str(exc).split()))
    config = {_text(key): _text(value) for key, value in raw.items()}
    policy, maxmemory = config.get("maxmemory-policy"), config.get("maxmemory")
    if policy is None or maxmemory is None:
        return EvictionPolicy(server, None, error="CONFIG GET maxmemory* returned nothing")
    try:
        limit = int(maxmemory)
    except ValueError:
        return EvictionPolicy(server, None, error=f"maxmemory is {maxmemory!r}")
    return EvictionPolicy(server, policy, limit)
