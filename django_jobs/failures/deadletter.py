"""Dead-letter services: record, requeue, discard. The admin and the ``deadletters`` command both
call these, so a change made from a terminal is the same change, checked and audited the same way."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import DEFAULT_DB_ALIAS, IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from django_jobs.client.enqueue import Envelope, Options, build, deliver
from django_jobs.conf import jobs_settings
from django_jobs.core import audit, payload, registry
from django_jobs.core.outcomes import AttemptEnded, Settling
from django_jobs.exceptions import JobNotFound, LimitKeyError, PayloadError
from django_jobs.failures import alerts
from django_jobs.failures.triage import triage
from django_jobs.models import DeadLetter
from django_jobs.signals import job_dead_lettered, job_requeued
from django_jobs.store import JobRecord, surrogate_id, to_bytes, to_text, valid_job_id

logger = logging.getLogger("django_jobs.deadletter")

# One permission per view and action, checked by the admin and the deadletters command alike.
PAYLOAD_PERMISSION = "django_jobs.view_deadletter_payload"
REQUEUE_PERMISSION = "django_jobs.requeue_deadletter"
DISCARD_PERMISSION = "django_jobs.discard_deadletter"
OVERVIEW_PERMISSION = "django_jobs.view_queue_overview"
#: Why a requeue left an entry open although its job is registered (``Requeued.refused``).
REFUSED = "the job's limit_key gives no key for its arguments"


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


#: Bytes of one value the raw snapshot keeps; longer values keep this much, their size and SHA-256.
SNAPSHOT_VALUE_BYTES = 1024 * 1024
#: Characters of a message and of a traceback (its end) kept in their columns; the snapshot keeps more.
MESSAGE_CHARS, TRACEBACK_CHARS = 20_000, 100_000


def _snapshot_value(value: bytes) -> str | dict[str, Any]:
    if len(value) <= SNAPSHOT_VALUE_BYTES:
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    head = base64.b64encode(value[:SNAPSHOT_VALUE_BYTES]).decode()
    return {"base64": head, "bytes": len(value), "sha256": hashlib.sha256(value).hexdigest()}


def _snapshot(fields: dict[str, bytes]) -> str:
    """The fields as JSON any database stores (pure ASCII): UTF-8 values as text, other bytes as
    base64, and a field name that is not UTF-8 escaped, with its exact bytes in ``name_base64``."""
    shown: dict[str, Any] = {}
    for name, value in fields.items():
        raw_name = to_bytes(name)
        try:
            shown[raw_name.decode()] = _snapshot_value(value)
        except UnicodeDecodeError:
            entry = _snapshot_value(value)
            entry = entry if isinstance(entry, dict) else {"base64": base64.b64encode(value).decode()}
            shown[raw_name.decode(errors="backslashreplace")] = {
                **entry,
                "name_base64": base64.b64encode(raw_name).decode(),
            }
    return json.dumps(shown, indent=1)


def _escape(text: str) -> str:
    """Text any database stores: NUL and lone surrogates (PostgreSQL refuses both) as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


class _Storable:
    """Makes a failure's values storable, remembering the original of each value it had to change."""

    def __init__(self) -> None:
        self.originals: dict[str, bytes] = {}

    def text(self, column: str, value: str, limit: int, *, tail: bool = False) -> str:
        clean = _escape(value)
        clean = clean[-limit:] if tail else clean[:limit]
        if clean != value:
            self.originals[f"djjobs:original {column}"] = to_bytes(value)
        return clean

    def json(self, column: str, value: Any, original: bytes) -> Any:
        try:
            clean = _json_safe(value)
        except RecursionError:
            clean = type(value)()
        if clean != value:
            self.originals[f"djjobs:original {column}"] = original
        return clean


def _json_safe(value: Any) -> Any:
    """JSON that PostgreSQL's jsonb accepts: escaped strings, non-finite numbers as text."""
    if isinstance(value, str):
        return _escape(value)
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, list):
        return [_json_safe(item) for item in value]
    if isinstance(value, dict):
        return {_escape(str(key)): _json_safe(item) for key, item in value.items()}
    return value


_POISON = (
    DeadLetter.Reason.UNDECODABLE,
    DeadLetter.Reason.UNREGISTERED,
    DeadLetter.Reason.UNREADABLE,
    DeadLetter.Reason.VANISHED,
)


def _payload_parts(job: JobRecord) -> tuple[str, list[Any], dict[str, Any]]:
    try:
        return payload.loads_tagged(job.data)
    except PayloadError:
        # RQ's description is the call with its arguments' repr: keep the name, never the arguments
        return to_text(job.fields.get("description", b"(unknown)")).partition("(")[0] or "(unknown)", [], {}


def _storable_id(job_id: str, clean: _Storable) -> str:
    """The id to file the row under: the job's own, or a stable surrogate if it breaks the id rule."""
    if valid_job_id(job_id):
        return job_id
    clean.originals["djjobs:original job_id"] = to_bytes(job_id)
    return surrogate_id(to_bytes(job_id))


def _storable_reason(reason: str, clean: _Storable) -> str:
    """A reason read back from a job hash may be anything; one that is not a choice is unreadable."""
    if reason in DeadLetter.Reason.values:
        return reason
    clean.originals["djjobs:original reason"] = to_bytes(reason)
    return DeadLetter.Reason.UNREADABLE


def _columns(failure: Failure, fields: dict[str, bytes], clean: _Storable) -> dict[str, Any]:
    job = JobRecord(failure.job_id, fields)
    name, args, kwargs = _payload_parts(job)
    data = job.data
    name = clean.text("job_name", name, 200)
    exception = clean.text("exception", failure.exception, 300)
    traceback = clean.text("traceback", failure.traceback, TRACEBACK_CHARS, tail=True)
    history = clean.json("history", failure.history, to_bytes(json.dumps(failure.history, default=str)))
    facts = triage(name, exception, traceback, history)
    return {
        "job_name": name,
        "queue": clean.text("queue", failure.queue, 100),
        "args": clean.json("args", args, data),
        "kwargs": clean.json("kwargs", kwargs, data),
        "exception": exception,
        "message": clean.text("message", failure.message, MESSAGE_CHARS),
        "traceback": traceback,
        "raised_at": facts.raised_at,
        "fingerprint": facts.fingerprint,
        "attempts": min(max(job.attempt, 0), 2**31 - 1),  # any integer column
        "history": history,
        "reason": _storable_reason(failure.reason, clean),
        "first_failed_at": _storable_time(facts.first_failed_at),
    }


def _storable_time(when: dt.datetime | None) -> dt.datetime:
    """A time read from the attempt history, if the database can hold it in UTC; else now."""
    try:
        return when.astimezone(dt.UTC) if when else timezone.now()
    except (OverflowError, ValueError):  # e.g. year 1 at +14:00 is before year 1 in UTC
        return timezone.now()


def record(failure: Failure, fields: dict[str, bytes]) -> DeadLetter:
    """Write the DeadLetter row (once per job id), then fire the signal and the alert hooks.

    Whatever the id, arguments, texts or hash hold, the row can be written: what no database can
    store is escaped in its column, and the originals are kept in the raw snapshot.
    """
    clean = _Storable()
    job_id = _storable_id(failure.job_id, clean)
    defaults = _columns(failure, fields, clean)
    poison = defaults["reason"] in _POISON
    defaults["raw"] = _snapshot({**fields, **clean.originals}) if poison or clean.originals else ""
    # A requeued job that died again points back at the entry it was requeued from.
    defaults["requeued_from"] = DeadLetter.objects.filter(requeued_job_id=job_id).only("pk").first()
    try:
        entry, created = DeadLetter.objects.get_or_create(job_id=job_id, defaults=defaults)
    except IntegrityError:  # a concurrent writer of the same job id won the race
        entry, created = DeadLetter.objects.get(job_id=job_id), False
    if created:
        job_dead_lettered.send(sender=entry.job_name, dead_letter=entry)
        alerts.fire(entry)
    return entry


def bury(store: Settling, failure: Failure, fields: dict[str, bytes]) -> DeadLetter:
    """Record the row, then release the job from Redis's ``dying`` set; a DB outage leaves it there."""
    entry = record(failure, fields)
    store.buried(failure.job_id, jobs_settings.FINISHED_TTL)
    return entry


def on_attempt_ended(event: AttemptEnded) -> None:
    """Outcome subscriber: write the dead letter of a job the store moved to "dying". On a database
    outage (or a failing alert hook) the job waits there for the supervisor to bury it later."""
    if not event.bury or event.judgement is None:
        return
    judged = event.judgement
    failure = Failure(
        event.job_id, event.queue, judged.reason, judged.exception, judged.message, judged.traceback,
        list(event.history),
    )  # fmt: skip
    bury(event.store, failure, event.claimed.fields)


def quarantine(failure: Failure, fields: dict[str, bytes], *, source: str, member: bytes) -> DeadLetter:
    """Record an item a maintenance loop cannot handle, with its raw data, so the loop can drop it.

    ``source`` names the Redis structure or table it came from and ``member`` is the item exactly
    as found there; both go into the snapshot. The caller removes the item once this returns.
    """
    snapshot = {**fields, "djjobs:source": source.encode(), "djjobs:member": member}
    entry = record(failure, snapshot)
    logger.warning(
        "Quarantined %s item %r as dead letter %s (job id %s, reason %s): %s",
        source,
        member[:200],
        entry.pk,
        entry.job_id,
        failure.reason,
        failure.message[:500],
    )
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
    """One admin log entry per changed entry: who (the actor), what (the message), when."""
    entries = [audit.Entry(str(entry.pk), str(entry), message) for entry, message in changes]
    audit.record(actor, entries, model=DeadLetter, using=using)


@dataclass
class Requeued:
    """What one requeue did: the entries it requeued, and those it left open because no job of
    their name is registered in this process (a renamed job without an alias, a poison entry), or
    (``refused``) because their job's ``limit_key`` gives no key for their arguments."""

    entries: list[DeadLetter] = field(default_factory=list)
    unknown: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)

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
            envelopes, start = [], len(done.entries)
            for entry in (
                DeadLetter.objects.using(using)
                .filter(pk__in=chunk, status=DeadLetter.Status.OPEN)
                .order_by("pk")
            ):
                envelope = _requeue_one(entry, done, rate, using)
                if envelope is not None:
                    envelopes.append(envelope)
            deliver(envelopes, using=using)
            won = done.entries[start:]
            _audit(
                actor,
                [(e, f"Requeued as job {e.requeued_job_id} ({len(pks)} selected).") for e in won],
                using,
            )
    return done


def _requeue_one(entry: DeadLetter, done: Requeued, rate: float, using: str) -> Envelope | None:
    """The job that replays ``entry``, if its name is registered and this caller wins the entry."""
    try:
        definition = registry.get(entry.job_name)
    except JobNotFound:
        done.unknown[entry.job_name] += 1
        return None
    envelope = build(
        definition.name,
        definition.queue,
        definition.timeout,
        entry.args,
        entry.kwargs,
        Options(delay=len(done.entries) / rate, priority=definition.priority),
    )
    try:
        envelope = _keyed(definition, envelope)
    except (PayloadError, LimitKeyError) as exc:
        logger.warning("Dead letter %s left open: %s", entry.pk, exc)
        done.refused[entry.job_name] += 1
        return None
    won = (
        DeadLetter.objects.using(using)
        .filter(pk=entry.pk, status=DeadLetter.Status.OPEN)
        .update(status=DeadLetter.Status.REQUEUED, requeued_job_id=envelope.id)
    )
    if not won:
        return None
    entry.status, entry.requeued_job_id = DeadLetter.Status.REQUEUED, envelope.id
    done.entries.append(entry)
    job_requeued.send(sender=entry.job_name, dead_letter=entry, job_id=envelope.id)
    return envelope


def _keyed(definition: registry.Job[Any, Any], envelope: Envelope) -> Envelope:
    """``envelope`` with the key its job type's limits count it under (``limit_key``), computed from
    its arguments as an enqueue would: a requeue is held to the same limits as the first run."""
    if definition.limit_key is None:
        return envelope
    _, args, kwargs = payload.loads(envelope.data)
    return dataclasses.replace(envelope, limit_key=definition.limit_value(args, kwargs))


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
