"""Every Redis key name django_jobs reads or writes, built here from the structures of
:mod:`.lifecycle` (their patterns are the one spelling of each name) and nowhere else, in a
:class:`Keyspace`: the names below are the standalone one's; a tagged keyspace (the cluster layout)
puts ``{tag}`` before each of them but the shared ones (worker records, cron locks, counters, alerts).

Jobs live where RQ keeps them, so ``rq info`` and the django-rq views read them:

* ``rq:job:<id>``        the job hash (``data`` is JSON shaped like RQ's JSONSerializer output; our
  fields start ``dj_``: ``dj_attempt``, ``dj_history``, ``dj_cancel`` once a running job was asked to stop);
* ``rq:queue:<q>``       the FIFO list of ready job ids of priority 0; ``rq:queues`` the set of queue keys;
* ``rq:scheduled:<q>``   due time -> job id, for retries and delayed jobs;
* ``rq:wip:<q>``         RQ's started registry, scored ``+inf`` so RQ's own cleanup never reaps our jobs;
* ``rq:worker:<name>``   RQ's worker record; ``rq:workers`` and ``rq:workers:<q>`` the sets of them.

django_jobs adds what RQ lacks:

* ``djjobs:leases``      ``<id>:<token>`` scored by lease expiry (Redis server time). The token
  fences a stale attempt: once its lease is gone, its completion is refused.
* ``djjobs:lost``        attempts whose worker died; the supervisor decides retry or dead letter.
  Scored by when they are due to be looked at: an item a pass could not settle goes behind the others.
* ``djjobs:dying``       jobs being dead-lettered; they leave only once the database row exists.
* ``djjobs:vanished``    ``<queue>\n<id>`` of ids popped from a queue whose hash was gone (evicted,
  deleted), waiting for a maintenance duty to write their ``vanished`` dead letter.
* ``djjobs:prio:<q>:high`` / ``:low`` the ready ids of priority > 0 / < 0, scored so that ZPOPMIN
  takes the highest priority first and, within one priority, the first pushed (``lua/ready.lua``);
  a claim takes ``high``, then the list, then ``low``.
* ``djjobs:wake:<q>``    wake-up tokens, so idle workers block on BLPOP without popping real jobs.
* ``djjobs:paused``      what is paused on this server: field ``queue:<q>`` or ``job:<name>`` (a job type's
  current name), value JSON ``{"at": Redis time, "by": who, "reason": why}``. A work process leaves a
  paused queue out of its claims; a claim that pops a job of a paused type parks it in
  ``djjobs:paused:<q>:<name>`` (a list, in the order popped; the hash gets ``dj_parked``), and
  ``djjobs:paused:lists`` is the set (JSON ``[queue, name]``) of the parked lists that may hold jobs.
* ``djjobs:unique:<k>``  the job holding a unique key; ``djjobs:slots:<scope>`` and
  ``djjobs:rate:<scope>:<window>`` the concurrency slots and rate counters of a limit's scope: a job
  type (its canonical name), or with ``limit_key`` one key value of it (``<name>\n<value>``).
* ``djjobs:parked:<q>``  the lines of ``<q>`` that hold jobs parked over their key's limit: each member
  a scope ``<name>\n<value>``, scored by when maintenance next looks at it; the line itself is the
  sorted set ``djjobs:parked:<q>\n<name>\n<value>`` of its job ids, scored by their turn (the hash
  gets ``dj_line``, its scope, and ``dj_turn``).
* ``djjobs:primary``     the identity (run_id, replication id) of the server last seen as primary,
  and when it last changed: a failover or a restart that may have lost acknowledged writes;
  ``djjobs:replmark`` a counter a "replicated" push bumps, so its ``WAIT`` covers what came before.
* ``djjobs:cron:<name>:<period>`` a periodic job's fire lock; ``djjobs:stats:*`` the outcome counters;
  ``djjobs:alert*`` the alert windows.
"""

from __future__ import annotations

import datetime as dt
import re

from django_jobs.store import lifecycle as lc
from django_jobs.store.lifecycle import QueueKeys, Structure

__all__ = ["STANDALONE", "Keyspace", "QueueKeys"]

#: Queues whose keys a keyspace keeps built.
_QUEUES_KEPT = 256
#: What a tag may be: a job id's characters (no brace, no colon), so it can one day ride in a job id.
_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Keyspace:
    """The names of the keys of one namespace: each structure of :data:`.lifecycle.STRUCTURES` that is
    not ``shared``, rendered for it. A :class:`~.machine.Store` builds every key through its keyspace.

    The standalone keyspace (no ``tag``) gives the table's names as they are, RQ's own, so RQ's tools
    read our jobs. A tagged one puts ``{tag}`` before every name: Redis Cluster hashes only what is
    between the first braces, so all of a namespace's keys share one slot, and each transition stays
    one script however the cluster's slots move."""

    def __init__(self, tag: str = "") -> None:
        if tag and not _TAG.fullmatch(tag):
            raise ValueError(f"a keyspace's tag is letters, digits, _ and -, at most 64 of them, got {tag!r}")
        self.tag = tag
        self._brace = "{" + tag + "}" if tag else ""
        self.job_prefix = self.prefix(lc.JOB)
        self.queue_prefix = self.prefix(lc.QUEUE)
        self.queues_set = self.name(lc.QUEUES)
        self.leases = self.name(lc.LEASES)
        self.lost = self.name(lc.LOST)
        self.dying = self.name(lc.DYING)
        self.vanished = self.name(lc.VANISHED)
        self.paused = self.name(lc.PAUSED)
        self.parked_lists = self.name(lc.PARKED_LISTS)
        self.primary = self.name(lc.PRIMARY)
        self.replication_mark = self.name(lc.REPLICATION_MARK)
        self.slots_prefix = self.prefix(lc.SLOTS)
        self.rates_prefix = self.prefix(lc.RATE)  # of every scope's rate counters
        self._queue_keys: dict[str, dict[str, str]] = {}

    def __repr__(self) -> str:
        return f"Keyspace({self.tag!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Keyspace) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)  # one store per connection and namespace, however often it is asked for

    def name(self, structure: Structure, **parts: str) -> str:
        """The key of ``structure`` with these parts, in this namespace (a shared one: as it is)."""
        return structure.key(**parts) if structure.shared else self._brace + structure.key(**parts)

    def prefix(self, structure: Structure) -> str:
        """What every key of ``structure`` starts with, in this namespace."""
        return structure.prefix if structure.shared else self._brace + structure.prefix

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def queue(self, queue: str) -> str:
        return self.queue_prefix + queue

    def priority(self, queue: str) -> tuple[str, str]:
        """The sorted sets of the ready ids of ``queue`` with a priority above 0, and below 0."""
        return self.name(lc.HIGH, queue=queue), self.name(lc.LOW, queue=queue)

    def scheduled(self, queue: str) -> str:
        return self.name(lc.SCHEDULED, queue=queue)

    def parked(self, queue: str, name: str) -> str:
        """Where the claim parks the jobs of ``queue`` whose type ``name`` is paused, in the order popped."""
        return self.name(lc.PARKED, queue=queue, name=name)

    def wip(self, queue: str) -> str:
        return self.name(lc.WIP, queue=queue)

    def failed(self, queue: str) -> str:
        """RQ's failed registry of ``queue``: where a foreign worker leaves the jobs it failed."""
        return self.name(lc.RQ_FAILED, queue=queue)

    def results(self, job_id: str) -> str:
        return self.name(lc.RQ_RESULTS, id=job_id)

    def wake(self, queue: str) -> str:
        return self.name(lc.WAKE, queue=queue)

    def unique(self, key: str) -> str:
        return self.name(lc.UNIQUE, key=key)

    def slots(self, scope: str) -> str:
        """The concurrency slots of a job type (its canonical name) or of a :func:`limit_scope`."""
        return self.slots_prefix + scope

    def rate_prefix(self, scope: str) -> str:
        """The rate counters of ``scope`` are this prefix plus the window number (Redis time / period)."""
        return self.name(lc.RATE, scope=scope, window="")

    def parked_index(self, queue: str) -> str:
        """The scopes of ``queue`` with jobs parked over their limit, by when maintenance looks next."""
        return self.name(lc.LINES, queue=queue)

    def parked_line(self, queue: str, scope: str) -> str:
        """The jobs of ``queue`` parked over the limit of ``scope``, scored by their turn."""
        return self.name(lc.LINE, queue=queue, scope=scope)

    def layout(self, queue: str) -> QueueKeys:
        """Every per-queue key of ``queue``, in the one order scripts take them in."""
        high, low = self.priority(queue)
        return QueueKeys(
            self.queue(queue), self.scheduled(queue), self.wip(queue), high, low, self.wake(queue),
            self.parked_index(queue),
        )  # fmt: skip

    def queue_keys(self, queue: str) -> dict[str, str]:
        """:meth:`layout` by name, as a script's queue group takes it: built once per queue, shared,
        not to be changed."""
        found = self._queue_keys.get(queue)
        if found is None:
            if len(self._queue_keys) >= _QUEUES_KEPT:  # a name read from a planted hash: not kept forever
                self._queue_keys.clear()
            found = self._queue_keys[queue] = self.layout(queue)._asdict()
        return found


#: The standalone layout: the table's names, RQ's own. The names below are its.
STANDALONE = Keyspace()

JOB_PREFIX = STANDALONE.job_prefix
QUEUES_SET = STANDALONE.queues_set
LEASES = STANDALONE.leases
LOST = STANDALONE.lost
DYING = STANDALONE.dying
VANISHED = STANDALONE.vanished
PAUSED = STANDALONE.paused
PARKED = STANDALONE.parked_lists
PRIMARY = STANDALONE.primary
REPLICATION_MARK = STANDALONE.replication_mark
job_key = STANDALONE.job
queue_key = STANDALONE.queue
priority_keys = STANDALONE.priority
scheduled_key = STANDALONE.scheduled
parked_key = STANDALONE.parked
wip_key = STANDALONE.wip
failed_key = STANDALONE.failed
wake_key = STANDALONE.wake
unique_key = STANDALONE.unique
slots_key = STANDALONE.slots
rate_prefix = STANDALONE.rate_prefix
parked_index = STANDALONE.parked_index
parked_line = STANDALONE.parked_line
queue_layout = STANDALONE.layout

# The shared structures: one key whatever the namespace.
WORKER_PREFIX = lc.WORKER.prefix
WORKERS_SET = lc.WORKERS.pattern
ALERT_DUE = lc.ALERT_DUE.pattern
#: Prefixes of the alert keys of one fingerprint (a script scanning ALERT_DUE appends the fingerprint).
ALERT_WINDOW_PREFIX = lc.ALERT_WINDOW.prefix
ALERT_COUNT_PREFIX = lc.ALERT_COUNT.prefix
ALERT_LAST_PREFIX = lc.ALERT_LAST.prefix


def pause_field(kind: str, name: str) -> str:
    """The field of :data:`PAUSED` that pauses a queue (``kind`` "queue") or a job type ("job")."""
    return f"{kind}:{name}"


def limit_scope(name: str, value: str) -> str:
    """What a per-key limit counts: one key value of the job type named ``name`` (canonical). A key
    value holds no newline, so the last one splits the two apart."""
    return f"{name}\n{value}"


def worker_key(name: str) -> str:
    return WORKER_PREFIX + name


def queue_workers_key(queue: str) -> str:
    return lc.QUEUE_WORKERS.key(queue=queue)


def cron_lock(name: str, start: dt.datetime) -> str:
    return lc.CRON_LOCK.key(name=name, start=str(int(start.timestamp())))


def stats_minute(when: dt.datetime) -> str:
    return lc.STATS_MINUTE.key(minute=f"{when.astimezone(dt.UTC):%Y%m%d%H%M}")


def stats_hour(when: dt.datetime) -> str:
    return lc.STATS_HOUR.key(hour=f"{when.astimezone(dt.UTC):%Y%m%d%H}")


def quarantine_key(key: str, when: float) -> str:
    """Where a structure key of the wrong type is moved aside, unchanged: its own name inside the
    new one, so a tagged key keeps its tag first, and its hash slot (a rename stays on its node)."""
    return lc.QUARANTINE.key(key=key, when=f"{when:.6f}")


def alert_keys(fingerprint: str) -> list[str]:
    """A group's window marker, count and last counted dead letter, then :data:`ALERT_DUE`."""
    return [
        ALERT_WINDOW_PREFIX + fingerprint,
        ALERT_COUNT_PREFIX + fingerprint,
        ALERT_LAST_PREFIX + fingerprint,
        ALERT_DUE,
    ]
