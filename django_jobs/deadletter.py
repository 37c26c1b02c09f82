"""Dead-letter services: record, requeue, discard. The admin and the ``deadletters`` command both
call these, so a change made from a terminal is the same change, checked and audited the same way."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.contrib.contenttypes.models import ContentType
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from . import alerts, payload, registry
from .conf import jobs_settings
from .enqueue import Options, build, deliver
from .exceptions import JobNotFound, PayloadError
from .models import DeadLetter
from .signals import job_dead_lettered
from .store import Store, int_field
from .triage import triage

logger = logging.getLogger("django_jobs.deadletter")

# One permission per view and action, checked by the admin and the deadletters command alike.
PAYLOAD_PERMISSION = "django_jobs.view_deadletter_payload"
REQUEUE_PERMISSION = "django_jobs.requeue_deadletter"
DISCARD_PERMISSION = "django_jobs.discard_deadletter"
OVERVIEW_PERMISSION = "django_jobs.view_queue_overview"


@dataclass
class Failure:
    """What is known about a job's last failure, ready to become a DeadLetter row."""

    job_id: str
    queue: str
    reason: str
    exception: str
    message: str
    traceback: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)


def _snapshot(fields: dict[str, bytes]) -> str:
    return json.dumps({k: v.decode(errors="replace") for k, v in fields.items()}, indent=1)[:100_000]


_POISON = (DeadLetter.Reason.UNDECODABLE, DeadLetter.Reason.UNREGISTERED)


def _payload_parts(fields: dict[str, bytes]) -> tuple[str, list[Any], dict[str, Any]]:
    try:
        return payload.loads_tagged(fields.get("data", b""))
    except PayloadError:
        # RQ's description is the call with its arguments' repr: keep the name, never the arguments
        description = fields.get("description", b"(unknown)").decode(errors="replace")
        return description.partition("(")[0] or "(unknown)", [], {}


def record(failure: Failure, fields: dict[str, bytes]) -> DeadLetter:
    """Write the DeadLetter row (once per job id), then fire the signal and the alert hooks."""
    name, args, kwargs = _payload_parts(fields)
    exception = failure.exception[:300]
    facts = triage(name[:200], exception, failure.traceback, failure.history)
    defaults = {
        "job_name": name[:200],
        "queue": failure.queue[:100],
        "args": args,
        "kwargs": kwargs,
        "raw": _snapshot(fields) if failure.reason in _POISON else "",
        "exception": exception,
        "message": failure.message,
        "traceback": failure.traceback,
        "raised_at": facts.raised_at,
        "fingerprint": facts.fingerprint,
        "attempts": int_field(fields, "dj_attempt", 0),
        "history": failure.history,
        "reason": failure.reason,
        "first_failed_at": facts.first_failed_at or timezone.now(),
        # A requeued job that died again points back at the entry it was requeued from.
        "requeued_from": DeadLetter.objects.filter(requeued_job_id=failure.job_id).only("pk").first(),
    }
    try:
        entry, created = DeadLetter.objects.get_or_create(job_id=failure.job_id, defaults=defaults)
    except IntegrityError:  # a concurrent writer of the same job id won the race
        entry, created = DeadLetter.objects.get(job_id=failure.job_id), False
    if created:
        job_dead_lettered.send(sender=entry.job_name, dead_letter=entry)
        alerts.fire(entry)
    return entry


def bury(store: Store, failure: Failure, fields: dict[str, bytes]) -> DeadLetter:
    """Record the row, then release the job from Redis's ``dying`` set; a DB outage leaves it there."""
    entry = record(failure, fields)
    store.buried(failure.job_id, jobs_settings.FINISHED_TTL)
    return entry


Actor: TypeAlias = AbstractBaseUser | AnonymousUser | None
Entries: TypeAlias = QuerySet[DeadLetter] | Iterable[DeadLetter]

#: Entries changed per transaction: big enough to be quick, small enough to keep locks short.
CHUNK = 500


def _open_pks(entries: Entries) -> list[int]:
    """The ids to act on, oldest first. Rows are re-read under the compare-and-set, never trusted."""
    if isinstance(entries, QuerySet):
        return list(entries.filter(status=DeadLetter.Status.OPEN).order_by("pk").values_list("pk", flat=True))
    return sorted({entry.pk for entry in entries})


def _chunks(pks: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(pks), CHUNK):
        yield pks[start : start + CHUNK]


def _audit(actor: Actor, changes: list[tuple[DeadLetter, str]], using: str) -> None:
    """One LogEntry per changed entry: who (the actor), what (the message), when (action time)."""
    if actor is None or not actor.is_authenticated or not changes:
        return
    # Imported here: the worker records dead letters without django.contrib.admin installed.
    from django.contrib.admin.models import CHANGE, LogEntry

    content_type = ContentType.objects.db_manager(using).get_for_model(DeadLetter)
    LogEntry.objects.using(using).bulk_create(
        LogEntry(
            user_id=actor.pk,
            content_type=content_type,
            object_id=str(entry.pk),
            object_repr=str(entry)[:200],
            action_flag=CHANGE,
            change_message=message,
        )
        for entry, message in changes
    )


@dataclass
class Requeued:
    """What one requeue did: the entries it requeued, and those it left open because no job of
    their name is registered in this process (a renamed job without an alias, a poison entry)."""

    entries: list[DeadLetter] = field(default_factory=list)
    unknown: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.entries)


def requeue(
    entries: Entries, *, actor: Actor = None, using: str = DEFAULT_DB_ALIAS, rate: float | None = None
) -> Requeued:
    """Send each open entry back as a new job with fresh attempts.

    The status change is a compare-and-set in the same transaction as the enqueue (which goes
    through the outbox), so a double submit or two operators at once requeue an entry once, and a
    crash cannot mark an entry requeued without its job being queued. The jobs go out at ``rate``
    per second (``JOBS["REQUEUE_RATE"]``): the later ones wait in the scheduled set, so replaying
    10,000 entries does not land on the workers at once.
    """
    rate = jobs_settings.REQUEUE_RATE if rate is None else rate
    if not rate > 0:
        raise ValueError(f"The requeue rate must be a positive number of jobs per second, got {rate!r}.")
    pks = _open_pks(entries)
    done = Requeued()
    for chunk in _chunks(pks):
        with transaction.atomic(using=using):
            envelopes, changes = [], []
            for entry in (
                DeadLetter.objects.using(using)
                .filter(pk__in=chunk, status=DeadLetter.Status.OPEN)
                .order_by("pk")
            ):
                try:
                    definition = registry.get(entry.job_name)
                except JobNotFound:
                    done.unknown[entry.job_name] += 1
                    continue
                envelope = build(
                    definition.name,
                    definition.queue,
                    definition.timeout,
                    entry.args,
                    entry.kwargs,
                    Options(delay=len(done.entries) / rate),
                )
                won = (
                    DeadLetter.objects.using(using)
                    .filter(pk=entry.pk, status=DeadLetter.Status.OPEN)
                    .update(status=DeadLetter.Status.REQUEUED, requeued_job_id=envelope.id)
                )
                if won:
                    entry.status, entry.requeued_job_id = DeadLetter.Status.REQUEUED, envelope.id
                    envelopes.append(envelope)
                    changes.append((entry, f"Requeued as job {envelope.id} ({len(pks)} selected)."))
                    done.entries.append(entry)
            deliver(envelopes, using=using)
            _audit(actor, changes, using)
    return done


def discard(entries: Entries, *, actor: Actor = None, using: str = DEFAULT_DB_ALIAS) -> int:
    """Mark open entries resolved without running them; the rows stay for the record."""
    pks = _open_pks(entries)
    count = 0
    for chunk in _chunks(pks):
        with transaction.atomic(using=using):
            # Locked, so a requeue cannot slip in between the read and the update.
            rows = list(
                DeadLetter.objects.using(using)
                .select_for_update()
                .filter(pk__in=chunk, status=DeadLetter.Status.OPEN)
                .only("pk", "job_name", "exception")
            )
            DeadLetter.objects.using(using).filter(pk__in=[row.pk for row in rows]).update(
                status=DeadLetter.Status.DISCARDED
            )
            _audit(actor, [(row, f"Discarded ({len(pks)} selected).") for row in rows], using)
            count += len(rows)
    return count
