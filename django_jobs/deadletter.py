"""Dead-letter services: record, requeue, discard. The admin and the CLI both call these."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction

from . import alerts, payload, registry
from .conf import jobs_settings
from .enqueue import build, deliver
from .exceptions import PayloadError
from .models import DeadLetter
from .signals import job_dead_lettered
from .store import Store, int_field

logger = logging.getLogger("django_jobs.deadletter")


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


def _payload_parts(fields: dict[str, bytes]) -> tuple[str, list[Any], dict[str, Any]]:
    try:
        return payload.loads_tagged(fields.get("data", b""))
    except PayloadError:
        return fields.get("description", b"(unknown)").decode(errors="replace"), [], {}


def record(failure: Failure, fields: dict[str, bytes]) -> DeadLetter:
    """Write the DeadLetter row (once per job id), then fire the signal and the alert hooks."""
    name, args, kwargs = _payload_parts(fields)
    poison = failure.reason in (DeadLetter.Reason.UNDECODABLE, DeadLetter.Reason.UNREGISTERED)
    defaults = {
        "job_name": name[:200],
        "queue": failure.queue[:100],
        "args": args,
        "kwargs": kwargs,
        "raw": _snapshot(fields) if poison else "",
        "exception": failure.exception[:300],
        "message": failure.message,
        "traceback": failure.traceback,
        "attempts": int_field(fields, "dj_attempt", 0),
        "history": failure.history,
        "reason": failure.reason,
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


def _audit(actor: AbstractBaseUser | AnonymousUser | None, entries: list[DeadLetter], message: str) -> None:
    if actor is not None and actor.is_authenticated and entries:
        LogEntry.objects.log_actions(
            user_id=actor.pk, queryset=entries, action_flag=CHANGE, change_message=message
        )


def requeue(
    entries: Iterable[DeadLetter],
    *,
    actor: AbstractBaseUser | AnonymousUser | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> list[DeadLetter]:
    """Send each open entry back as a new job with fresh attempts; returns the entries requeued.

    The status change is a compare-and-set in the same transaction as the enqueue (which goes
    through the outbox), so a double submit requeues once and a crash cannot mark an entry
    requeued without its job being queued.
    """
    done = []
    for entry in entries:
        definition = registry.get(entry.job_name)
        with transaction.atomic(using=using):
            envelope = build(definition.name, definition.queue, definition.timeout, entry.args, entry.kwargs)
            won = (
                DeadLetter.objects.using(using)
                .filter(pk=entry.pk, status=DeadLetter.Status.OPEN)
                .update(status=DeadLetter.Status.REQUEUED, requeued_job_id=envelope.id)
            )
            if won:
                deliver([envelope], using=using)
                entry.status, entry.requeued_job_id = DeadLetter.Status.REQUEUED, envelope.id
                done.append(entry)
    _audit(actor, done, "Requeued")
    return done


def discard(entries: Iterable[DeadLetter], *, actor: AbstractBaseUser | AnonymousUser | None = None) -> int:
    """Mark open entries resolved without running them; the rows stay for the record."""
    pks = [e.pk for e in entries]
    changed = list(DeadLetter.objects.filter(pk__in=pks, status=DeadLetter.Status.OPEN))
    DeadLetter.objects.filter(pk__in=[e.pk for e in changed]).update(status=DeadLetter.Status.DISCARDED)
    _audit(actor, changed, "Discarded")
    return len(changed)
