"""Every Redis key name django_jobs reads or writes, built here from the structures of
:mod:`.lifecycle` (their patterns are the one spelling of each name) and nowhere else.

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

from django_jobs.store import lifecycle as lc
from django_jobs.store.lifecycle import QueueKeys, queue_layout

__all__ = ["QueueKeys", "queue_layout"]

JOB_PREFIX = lc.JOB.prefix
QUEUE_PREFIX = lc.QUEUE.prefix
QUEUES_SET = lc.QUEUES.pattern
WORKER_PREFIX = lc.WORKER.prefix
WORKERS_SET = lc.WORKERS.pattern
LEASES = lc.LEASES.pattern
LOST = lc.LOST.pattern
DYING = lc.DYING.pattern
VANISHED = lc.VANISHED.pattern
ALERT_DUE = lc.ALERT_DUE.pattern
PAUSED = lc.PAUSED.pattern
PARKED = lc.PARKED_LISTS.pattern
PRIMARY = lc.PRIMARY.pattern
REPLICATION_MARK = lc.REPLICATION_MARK.pattern
#: Prefixes of the alert keys of one fingerprint (a script scanning ALERT_DUE appends the fingerprint).
ALERT_WINDOW_PREFIX = lc.ALERT_WINDOW.prefix
ALERT_COUNT_PREFIX = lc.ALERT_COUNT.prefix
ALERT_LAST_PREFIX = lc.ALERT_LAST.prefix
SLOTS_PREFIX = lc.SLOTS.prefix
RATE_PREFIX = lc.RATE.prefix


def job_key(job_id: str) -> str:
    return JOB_PREFIX + job_id


def queue_key(queue: str) -> str:
    return QUEUE_PREFIX + queue


def priority_keys(queue: str) -> tuple[str, str]:
    """The sorted sets of the ready ids of ``queue`` with a priority above 0, and below 0."""
    return lc.HIGH.key(queue=queue), lc.LOW.key(queue=queue)


def ready_keys(queue: str) -> list[str]:
    """Every place a ready job of ``queue`` waits for a worker: a cancel takes it out of each."""
    return [queue_key(queue), *priority_keys(queue)]


def scheduled_key(queue: str) -> str:
    return lc.SCHEDULED.key(queue=queue)


def waiting_keys(job_id: str, queue: str) -> list[str]:
    """A job's hash, then every place it can wait in ``queue``: its scheduled set and ready places
    (the KEYS the cancel and run-now scripts share)."""
    return [job_key(job_id), scheduled_key(queue), *ready_keys(queue)]


def pause_field(kind: str, name: str) -> str:
    """The field of :data:`PAUSED` that pauses a queue (``kind`` "queue") or a job type ("job")."""
    return f"{kind}:{name}"


def parked_key(queue: str, name: str) -> str:
    """Where the claim parks the jobs of ``queue`` whose type ``name`` is paused, in the order popped."""
    return lc.PARKED.key(queue=queue, name=name)


def wip_key(queue: str) -> str:
    return lc.WIP.key(queue=queue)


def failed_key(queue: str) -> str:
    """RQ's failed registry of ``queue``: where a foreign worker leaves the jobs it failed."""
    return lc.RQ_FAILED.key(queue=queue)


def results_key(job_id: str) -> str:
    return lc.RQ_RESULTS.key(id=job_id)


def wake_key(queue: str) -> str:
    return lc.WAKE.key(queue=queue)


def unique_key(key: str) -> str:
    return lc.UNIQUE.key(key=key)


def limit_scope(name: str, value: str) -> str:
    """What a per-key limit counts: one key value of the job type named ``name`` (canonical). A key
    value holds no newline, so the last one splits the two apart."""
    return f"{name}\n{value}"


def slots_key(scope: str) -> str:
    """The concurrency slots of a job type (its canonical name) or of a :func:`limit_scope`."""
    return SLOTS_PREFIX + scope


def rate_prefix(scope: str) -> str:
    """The rate counters of ``scope`` are this prefix plus the window number (Redis time / period)."""
    return lc.RATE.key(scope=scope, window="")


def parked_index(queue: str) -> str:
    """The scopes of ``queue`` with jobs parked over their limit, scored by when maintenance looks next."""
    return lc.LINES.key(queue=queue)


def parked_line(queue: str, scope: str) -> str:
    """The jobs of ``queue`` parked over the limit of ``scope``, scored by their turn."""
    return lc.LINE.key(queue=queue, scope=scope)


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
    """Where a structure key of the wrong type is moved aside, unchanged."""
    return lc.QUARANTINE.key(key=key, when=f"{when:.6f}")


def alert_keys(fingerprint: str) -> list[str]:
    """A group's window marker, count and last counted dead letter, then :data:`ALERT_DUE`."""
    return [
        ALERT_WINDOW_PREFIX + fingerprint,
        ALERT_COUNT_PREFIX + fingerprint,
        ALERT_LAST_PREFIX + fingerprint,
        ALERT_DUE,
    ]
