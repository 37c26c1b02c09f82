"""The Redis database ``scripts/demo`` may use: one of its own.

The demo's worker takes every job on the queues ``default`` and ``emails`` of its database and
dead-letters the ones it does not know, so on a Redis another application uses it would eat that
application's jobs. A database qualifies only if it is empty or the demo marked it on an earlier
run; then it is emptied, so each run starts from nothing, as its fresh SQLite database does.

    python -m example_project.demo_redis URL    claim URL's database for the demo, or exit 1 saying why
"""

from __future__ import annotations

import sys

import redis

#: Written into a database the demo uses, so a later run knows the data in it is the demo's own.
MARKER = "example_project:demo"


class Refused(Exception):
    """The database holds data the demo did not write."""


def claim(url: str) -> str:
    """Mark ``url``'s database as the demo's, emptied of an earlier run's data, and describe it; raise
    ``Refused`` if it holds data the demo did not write."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    where = f"Redis database {client.connection_pool.connection_kwargs.get('db', 0)} at {url}"
    if client.exists(MARKER):
        client.flushdb()  # the demo's own, from an earlier run: that run's jobs are not this one's
    elif keys := client.dbsize():
        raise Refused(
            f"{where} holds {keys} key(s) that scripts/demo did not write: its worker would take "
            "another application's jobs. Point REDIS_URL at an empty database, or unset it to let "
            "the demo start a private Redis."
        )
    client.set(MARKER, "used by scripts/demo; delete the database's keys to give it back")
    return f"{where}, the demo's own"


def main(argv: list[str]) -> int:
    try:
        print(claim(argv[1]))
    except (Refused, redis.RedisError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
