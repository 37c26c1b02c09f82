"""The job state machine: one :class:`Store` per Redis connection and namespace (its keyspace), one
method per named transition.

Every transition is one Lua script (``lua/<name>.lua``, its KEYS and ARGV named in
:mod:`.scripts`), so a process killed at any instant leaves each job in exactly one of the
structures of :mod:`.keys`, never in none. The store is made of its parts, one concern each: the
push (:mod:`.push`), the claim and its gates (:mod:`.claim`), the settling of an attempt
(:mod:`.settling`), an operator's control (:mod:`.control`), maintenance (:mod:`.maintenance`) and
the reads (:mod:`.read`).
"""

from __future__ import annotations

import weakref

from redis import Redis

from django_jobs.store import push
from django_jobs.store.claim import Claiming
from django_jobs.store.control import Control
from django_jobs.store.keys import STANDALONE, Keyspace
from django_jobs.store.maintenance import Maintenance
from django_jobs.store.push import Pushing
from django_jobs.store.read import Reads
from django_jobs.store.scripts import Scripts
from django_jobs.store.settling import Settling


class Store(Pushing, Claiming, Settling, Control, Maintenance, Reads):
    """The transitions of jobs on one Redis connection; :meth:`of` shares one per connection."""

    WAKE_CAP = push.WAKE_CAP
    UNIQUE_TTL = push.UNIQUE_TTL

    def __init__(self, connection: Redis, keys: Keyspace = STANDALONE) -> None:
        self.connection = connection
        self.keys = keys
        self.scripts = Scripts(connection)

    @classmethod
    def of(cls, connection: Redis, keys: Keyspace = STANDALONE) -> Store:
        """The store of ``connection`` in the namespace of ``keys``, built once: registering the
        scripts hashes their text."""
        stores = _stores.setdefault(connection, {})
        store = stores.get(keys)
        if store is None:
            store = stores[keys] = cls(connection, keys)
        return store


_stores: weakref.WeakKeyDictionary[Redis, dict[Keyspace, Store]] = weakref.WeakKeyDictionary()
