"""Prove a job is idempotent: :func:`verify_idempotent` delivers it twice, as at-least-once delivery
will one day, and fails naming every effect the second delivery repeated.

Both deliveries run through the worker's own attempt (``backends.inline``: the registry, the retry
policy, the soft timeout, the outcome pipeline), in the caller's process and transaction. What each
one does is observed, not guessed:

* database writes, on every connection and in every thread the job reaches (an ``async def`` job's
  ORM calls run in another one), through a hook on Django's cursors: for each table the second
  delivery writes, its rows just before that delivery's first write to it are compared with its rows
  after, so an upsert or an ``UPDATE`` that sets what is already there repeats nothing, and an
  ``INSERT`` or an increment does;
* mails sent (Django's in-memory mail backend, for the verification only);
* jobs enqueued (captured, not queued; one with the first delivery's ``unique_key`` is not a repeat);
* effects the project declares with :func:`effect`, such as a call to a payment API, around its
  client: one made again with the same idempotency ``key`` is not a repeat.

django_jobs' own tables (idempotency keys, outbox, dead letters) are not effects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.core import mail
from django.db.backends.base.base import BaseDatabaseWrapper
from django.test import override_settings

from django_jobs.client.backends import inline
from django_jobs.client.backends.capture import CapturedJob
from django_jobs.core import execution, registry
from django_jobs.core.envelope import Envelope
from django_jobs.testing.effects import (
    Observer,
    Recorder,
    Rows,
    and_,
    call,
    count,
    envelope,
    hooks,
    observed,
    own_tables,
    recording,
    snapshot,
    written_table,
)
from django_jobs.testing.modes import capture_jobs

WORKER = "verify"


class NotIdempotent(AssertionError):
    """The second delivery of a job repeated an effect of the first."""


@dataclass
class _Delivery(Recorder, Observer):
    """What one delivery did: each write statement's rows, per table; with ``snapshots``, a table's
    rows just before the delivery first writes it."""

    mails: list[mail.EmailMessage] = field(default_factory=list)
    enqueued: list[CapturedJob] = field(default_factory=list)
    written: Counter[str] = field(default_factory=Counter)  # table -> rows its statements reported
    # (alias, table) -> its rows before the delivery first wrote it, and after the delivery
    found_before: dict[tuple[str, str], Rows | None] = field(default_factory=dict)
    found_after: dict[tuple[str, str], Rows | None] = field(default_factory=dict)
    snapshots: bool = False
    own: set[str] = field(default_factory=own_tables)

    def before(self, conn: BaseDatabaseWrapper, sql: str) -> None:
        table, where = written_table(sql), (conn.alias, written_table(sql))
        if table and table not in self.own and self.snapshots and where not in self.found_before:
            with observed(None):  # the verifier's own read
                self.found_before[where] = snapshot(*where)

    def after(self, conn: BaseDatabaseWrapper, cursor: Any, sql: str) -> None:
        table, rows = written_table(sql), getattr(cursor, "rowcount", 0) or 0
        if table and table not in self.own and rows > 0:
            self.written[table] += rows


def verify_idempotent(job: registry.Job[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run ``job(*args, **kwargs)`` as a worker would, deliver it again with the same payload, and
    raise :class:`NotIdempotent` naming each effect the second delivery repeated. Raises
    ``AssertionError`` if the first delivery fails: there is nothing to compare."""
    with override_settings(EMAIL_BACKEND="django.core.mail.backends.locmem.EmailBackend"), hooks():
        mail.outbox = []
        enqueued = envelope(job, args, kwargs)
        first = _deliver(enqueued, attempt=1, snapshots=False)
        second = _deliver(enqueued, attempt=2, snapshots=True)
    repeated = _repeated(first, second)
    if repeated:
        raise NotIdempotent(
            f"{job.name}{call(args, kwargs)} is not idempotent: the second delivery {and_(repeated)}. "
            "Guard the effect with django_jobs.idempotent(), make the write an upsert, or pass an "
            "idempotency key to the outside service."
        )


def _deliver(enqueued: Envelope, attempt: int, snapshots: bool) -> _Delivery:
    done = _Delivery(snapshots=snapshots)
    sent = len(mail.outbox)
    claimed = inline.claimed(enqueued, WORKER, attempt)
    with recording(done), observed(done), capture_jobs() as during:
        ended = execution.run(inline.InlineStore(), claimed, caller=execution.caller_transactions())
    if ended.exception is not None:
        raise AssertionError(
            f"delivery {attempt} of {enqueued.name} failed ({type(ended.exception).__name__}: "
            f"{ended.exception}): a verifier compares deliveries that succeed"
        ) from ended.exception
    done.mails, done.enqueued = list(mail.outbox[sent:]), list(during.jobs)
    done.found_after = {where: snapshot(*where) for where in done.found_before}
    return done


def _repeated(first: _Delivery, second: _Delivery) -> list[str]:
    """What the second delivery did again, in words."""
    found = []
    for where, before in second.found_before.items():
        changed = _changed(where[1], before, second.found_after[where], second.written[where[1]])
        found += [changed] if changed else []
    for message in second.mails:
        found.append(f"sent 1 mail to {', '.join(message.to) or 'nobody'} ({message.subject!r})")
    keys = {_unique(job) for job in first.enqueued} - {""}
    for job in second.enqueued:
        if not _unique(job) or _unique(job) not in keys:
            found.append(f"enqueued 1 job {job.name}")
    made = {effect.key for effect in first.effects if effect.key}
    for declared in second.effects:
        if declared.key is None or declared.key not in made:
            without = " without an idempotency key" if declared.key is None else ""
            found.append(f"made {declared.description}{without}")
    return found


def _changed(table: str, before: Rows | None, after: Rows | None, rows: int) -> str:
    if before is None or after is None:
        return f"wrote {rows} rows of `{table}`" if rows else ""
    added, removed = sum((after - before).values()), sum((before - after).values())
    if added > removed:
        return f"inserted {count(added - removed, 'row')} into `{table}`"
    if removed > added:
        return f"deleted {count(removed - added, 'row')} from `{table}`"
    return f"changed {count(added, 'row')} of `{table}`" if added else ""


def _unique(job: CapturedJob) -> str:
    return job.envelope.unique_key if job.envelope is not None else ""
