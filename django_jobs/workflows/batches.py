"""Batches: jobs enqueued together, and callbacks that run once every one of them has ended.

```python
@batch_callback(name="shop.export_ready", timeout=60)
def export_ready(done: Batch, export_id: int) -> None:
    Export.objects.filter(pk=export_id).update(status="ready")  # commits with the "ran" mark

with batch(on_success=export_ready.bind(export.pk), name=f"export {export.pk}"):
    for page in range(export.pages):
        export_page.enqueue(export.pk, page)  # each job enqueued in the block is a member
```

The batch, its members and its callbacks are rows written in the transaction that writes the
members' outbox rows: a batch that rolls back never exists, a committed one is never lost.

A member leaves ``pending`` once, by a conditional UPDATE, however often its job runs: through the
outcome pipeline (:func:`on_attempt_ended`, after dead-lettering), or through the :class:`Sweep`
every ``runjobs`` runs for what no event reports (a worker killed between settling an attempt and
publishing it, a waiting job cancelled, a dead letter requeued). The transaction that moves the
last member also moves the batch out of ``open`` by a conditional UPDATE and enqueues its callbacks
through the outbox: they are enqueued once. A callback's code runs in the transaction that marks it
run, so a second delivery of it does nothing.

Every writer locks the batch's row before its members' rows, so two of them never deadlock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import inspect
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec

from asgiref.sync import iscoroutinefunction
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Exists, F, OuterRef, QuerySet
from django.utils import timezone

from django_jobs.client import enqueue
from django_jobs.conf import jobs_settings
from django_jobs.core import payload, registry, results
from django_jobs.core.context import current as current_job
from django_jobs.core.envelope import Envelope, Options
from django_jobs.core.outcomes import AttemptEnded, Outcome
from django_jobs.exceptions import JobNotFound
from django_jobs.models import Batch, BatchCallback, BatchMember, DeadLetter, OutboxEntry, outbox_aliases
from django_jobs.policy import RetryPolicy
from django_jobs.signals import job_requeued
from django_jobs.store import Status
from django_jobs.store.lifecycle import F as Field
from django_jobs.telemetry import metrics

logger = logging.getLogger("django_jobs.batches")

P = ParamSpec("P")

PENDING, SUCCEEDED, ENDED = BatchMember.State.PENDING, BatchMember.State.SUCCEEDED, BatchMember.State.ENDED
SUCCESS, COMPLETE = BatchCallback.Kind.SUCCESS, BatchCallback.Kind.COMPLETE
#: How a member ended: its new state, and for ``ended`` the reason.
End = tuple[str, str]
#: Pending members a sweep reads per step.
PAGE = 500
#: Callback states after which its batch's row is no longer needed.
SETTLED_CALLBACKS = (BatchCallback.State.RAN, BatchCallback.State.SKIPPED)


@dataclass(frozen=True)
class BoundCallback:
    """A batch callback with the arguments it is called with, after the batch (encoded JSON)."""

    job: registry.Job[..., None]
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class CallbackJob(Generic[P]):
    """A batch callback: the registered job that runs ``func(batch, *args, **kwargs)`` once per batch."""

    job: registry.Job[..., None]

    def bind(self, *args: P.args, **kwargs: P.kwargs) -> BoundCallback:
        """This callback with its arguments: IDs and plain values, as every payload."""
        try:  # the wrapped function's own signature, its first parameter being the batch
            inspect.signature(self.job.func).bind(None, *args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"Batch callback {self.job.name!r} cannot take these arguments: {exc}") from None
        encoded_args, encoded_kwargs = payload.encode(args, kwargs)
        return BoundCallback(self.job, encoded_args, encoded_kwargs)


def batch_callback(
    *,
    timeout: float,
    name: str | None = None,
    queue: str = "default",
    retry: RetryPolicy | None = None,
    permanent: tuple[type[BaseException], ...] | type[BaseException] = (),
    priority: int = 0,
) -> Callable[[Callable[Concatenate[Batch, P], object]], CallbackJob[P]]:
    """Register ``func(batch, *args, **kwargs)`` as a job that can be a batch's ``on_success`` or
    ``on_complete``. It is called with the :class:`~django_jobs.models.Batch` (its counts and status
    as of now), inside the transaction that marks it run: its database writes commit with the mark,
    and a second delivery of the job finds the mark and does nothing."""

    def decorate(func: Callable[Concatenate[Batch, P], object]) -> CallbackJob[P]:
        if iscoroutinefunction(func):
            raise ValueError(
                f"@batch_callback {name or func.__qualname__!r}: an async def cannot run inside the "
                "transaction that marks it run; make it a plain def."
            )

        @functools.wraps(func)
        def run(batch_id: str, kind: str, *args: Any, **kwargs: Any) -> None:
            _run_callback(func, batch_id, kind, args, kwargs)

        register = registry.job(
            timeout=timeout, name=name, queue=queue, retry=retry, permanent=permanent, priority=priority
        )
        return CallbackJob(register(run))

    return decorate


def _run_callback(
    func: Callable[..., object], batch_id: str, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    running = current_job()
    ran = {"job_id": running.job_id} if running is not None else {}
    with transaction.atomic():
        marked = BatchCallback.objects.filter(
            batch_id=batch_id, kind=kind, state=BatchCallback.State.ENQUEUED
        ).update(state=BatchCallback.State.RAN, ran_at=timezone.now(), **ran)
        if not marked:  # a concurrent delivery waits here for the first one's commit, then finds it marked
            logger.info(
                "The %s callback of batch %s has nothing to run: it ran already, its batch has not fired, "
                "or the batch is gone.", kind, batch_id,
            )  # fmt: skip
            return
        func(Batch.objects.get(pk=batch_id), *args, **kwargs)


def _bound(kind: str, given: object) -> BoundCallback:
    if isinstance(given, CallbackJob):
        return given.bind()
    if isinstance(given, BoundCallback):
        return given
    what = f"the plain @job {given.name!r}" if isinstance(given, registry.Job) else repr(given)
    raise TypeError(
        f"on_{kind} takes a @batch_callback job, or one with its arguments (job.bind(...)); got {what}. "
        "A batch callback marks its run in the batch's row, so a second delivery of it does nothing."
    )


@dataclass(frozen=True)
class _Members:
    """An open batch block: each job enqueued in it is a member, written in the batch's transaction."""

    batch: Batch

    @property
    def id(self) -> str:
        return str(self.batch.pk)

    def gather(self, envelopes: Sequence[Envelope], using: str | None) -> None:
        if enqueue.transaction_alias(using) != DEFAULT_DB_ALIAS:
            raise ValueError(
                f"A batch's jobs are enqueued in its transaction on the {DEFAULT_DB_ALIAS!r} database; "
                f"this one would wait for {using!r}. Enqueue it outside the batch block."
            )
        BatchMember.objects.bulk_create(
            BatchMember(batch=self.batch, job_id=e.id, job_name=e.name, queue=e.queue) for e in envelopes
        )


@contextlib.contextmanager
def batch(
    *,
    on_success: CallbackJob[Any] | BoundCallback | None = None,
    on_complete: CallbackJob[Any] | BoundCallback | None = None,
    name: str = "",
) -> Iterator[Batch]:
    """``with batch(on_success=..., on_complete=...) as b:`` - every job enqueued in the block, in this
    thread, is a member of batch ``b``; the block is one transaction on the default database.

    Once every member has ended, ``on_complete`` is enqueued, and ``on_success`` too if every member
    succeeded; each runs once. A batch with no member fires as its block ends.
    """
    callbacks = {
        kind: _bound(kind, given)
        for kind, given in ((SUCCESS, on_success), (COMPLETE, on_complete))
        if given is not None
    }
    if enqueue.current_gathering() is not None:
        raise ValueError("Batches do not nest: a job enqueued in the inner block would belong to both.")
    with transaction.atomic(using=DEFAULT_DB_ALIAS):
        created = Batch.objects.create(name=str(name)[:200])
        BatchCallback.objects.bulk_create(
            BatchCallback(batch=created, kind=kind, job_name=bound.job.name, queue=bound.job.queue,
                          args=bound.args, kwargs=bound.kwargs)
            for kind, bound in callbacks.items()
        )  # fmt: skip
        with enqueue.gathering(_Members(created)):
            yield created
        created.total = BatchMember.objects.filter(batch=created).count()
        Batch.objects.filter(pk=created.pk).update(total=created.total)
        fired = _fire_if_done(created) if not created.total else []
    _count(fired)


# --- members ending ------------------------------------------------------------------------------


def settle(ends: Mapping[str, End]) -> int:
    """Move these members (job id -> how it ended) out of ``pending``; one that is out already stays
    as it is. One transaction per batch, which fires the batch if it moved its last pending member.
    Returns how many members moved."""
    given, moved = list(ends), 0
    for start in range(0, len(given), PAGE):
        by_batch: dict[uuid.UUID, list[str]] = defaultdict(list)
        pending = BatchMember.objects.filter(job_id__in=given[start : start + PAGE], state=PENDING)
        for batch_id, job_id in pending.values_list("batch_id", "job_id"):
            by_batch[batch_id].append(job_id)
        for batch_id, ids in by_batch.items():
            with transaction.atomic():
                count, fired = _settle_batch(batch_id, {job_id: ends[job_id] for job_id in ids})
            moved += count
            _count(fired)
    return moved


def _settle_batch(batch_id: uuid.UUID, ends: dict[str, End]) -> tuple[int, list[str]]:
    current = Batch.objects.select_for_update().filter(pk=batch_id).first()  # the batch's row first
    if current is None:
        return 0, []
    groups: dict[End, list[str]] = defaultdict(list)
    for job_id, end in ends.items():
        groups[end].append(job_id)
    now = timezone.now()
    moved: dict[str, int] = {SUCCEEDED: 0, ENDED: 0}
    for (state, reason), ids in groups.items():
        moved[state] += BatchMember.objects.filter(batch_id=batch_id, job_id__in=ids, state=PENDING).update(
            state=state, reason=reason, ended_at=now
        )
    if not any(moved.values()):
        return 0, []
    Batch.objects.filter(pk=batch_id).update(
        succeeded=F("succeeded") + moved[SUCCEEDED], ended=F("ended") + moved[ENDED]
    )
    current.succeeded += moved[SUCCEEDED]
    current.ended += moved[ENDED]
    return sum(moved.values()), _fire_if_done(current)


def _fire_if_done(current: Batch) -> list[str]:
    """If no member of the (locked) open batch is pending, close it and enqueue its callbacks in this
    transaction, through the outbox; returns the kinds enqueued."""
    if current.status != Batch.Status.OPEN or current.pending:
        return []
    status = Batch.Status.SUCCEEDED if not current.ended else Batch.Status.FAILED
    if not Batch.objects.filter(pk=current.pk, status=Batch.Status.OPEN).update(
        status=status, finished_at=timezone.now()
    ):
        return []
    fired, envelopes = [], []
    for callback in BatchCallback.objects.filter(batch_id=current.pk, state=BatchCallback.State.PENDING):
        if callback.kind == SUCCESS and status != Batch.Status.SUCCEEDED:
            BatchCallback.objects.filter(pk=callback.pk).update(state=BatchCallback.State.SKIPPED)
            continue
        envelope = _envelope(callback)
        BatchCallback.objects.filter(pk=callback.pk).update(
            state=BatchCallback.State.ENQUEUED, job_id=envelope.id, enqueued_at=timezone.now()
        )
        envelopes.append(envelope)
        fired.append(callback.kind)
    enqueue.deliver(envelopes)
    logger.info(
        "Batch %s %s: %d member(s) succeeded, %d ended otherwise; callbacks enqueued: %s",
        current.pk, status, current.succeeded, current.ended, ", ".join(fired) or "none",
    )  # fmt: skip
    return fired


def _envelope(callback: BatchCallback) -> Envelope:
    args = [str(callback.batch_id), callback.kind, *callback.args]
    try:
        definition = registry.get(callback.job_name)
    except JobNotFound:  # a worker dead-letters it as unregistered: in sight, and requeued once deployed
        return enqueue.build(callback.job_name, callback.queue, 1, args, callback.kwargs)
    options = Options(priority=definition.priority)
    return enqueue.build(
        definition.name, definition.queue, definition.timeout, args, callback.kwargs, options
    )


def _count(fired: Sequence[str]) -> None:
    for kind in fired:
        metrics.batch_callback(kind)


def on_attempt_ended(event: AttemptEnded) -> None:
    """Outcome subscriber, after dead-lettering: a member's end moves it out of ``pending``. For a job
    that is no member (no ``dj_batch`` in its hash) it costs one dict lookup."""
    if Field.BATCH not in event.claimed.fields:
        return
    end = _end_of(event)
    if end is not None:
        settle({event.job_id: end})


def _end_of(event: AttemptEnded) -> End | None:
    if event.outcome is Outcome.SUCCESS:
        return SUCCEEDED, ""
    if event.bury:  # the store moved it to "dying": it is dead-lettered, now or by the supervisor
        return ENDED, BatchMember.Reason.DEAD_LETTERED
    if event.outcome is Outcome.EXPIRED:  # dropped unrun; its status says canceled, as the sweep reads it
        return ENDED, BatchMember.Reason.CANCELLED
    # A cancelled attempt that was fenced off ended nothing: the job's own status says (cancels are rare).
    cancelled = event.outcome is Outcome.CANCELLED
    if cancelled and event.store.statuses([event.job_id]).get(event.job_id) == Status.CANCELED.value:
        return ENDED, BatchMember.Reason.CANCELLED
    return None


# --- the sweep -----------------------------------------------------------------------------------


def reconcile(batch_ids: Sequence[uuid.UUID | str]) -> int:
    """Settle, now, the pending members of these batches whose job has ended (see ``Sweep``);
    returns how many members moved."""
    members, after, moved = BatchMember.objects.filter(state=PENDING, batch_id__in=batch_ids), 0, 0
    while True:
        page = _page(members, after)
        moved += settle(_ends({job_id: queue for _, job_id, queue in page}))
        if len(page) < PAGE:
            return moved
        after = page[-1][0]


class Sweep:
    """One ``runjobs``' sweep: every ``BATCH_SWEEP_INTERVAL`` seconds it walks the pending members in
    id order and settles those whose job has ended, read from Redis and the dead letters: the ends no
    event reported. O(pending members), never O(history), one page per step, so the maintenance pass
    that calls :meth:`step` never waits for a whole sweep."""

    def __init__(self) -> None:
        self.after = 0  # the member id the walk goes on after; 0 between walks
        self.due = 0.0  # monotonic time the next walk starts

    def step(self) -> None:
        now = time.monotonic()
        if not self.after:
            if now < self.due:
                return
            self.due = now + jobs_settings.BATCH_SWEEP_INTERVAL
        page = _page(BatchMember.objects.filter(state=PENDING), self.after)
        self.after = page[-1][0] if len(page) == PAGE else 0  # moved on first: a failing page never stays
        moved = settle(_ends({job_id: queue for _, job_id, queue in page}))
        if moved:
            logger.info("Batch sweep: %d member(s) had ended with no event to say so; counted now.", moved)


def _page(members: QuerySet[BatchMember], after: int) -> list[tuple[int, str, str]]:
    return list(members.filter(pk__gt=after).order_by("pk").values_list("pk", "job_id", "queue")[:PAGE])


def _ends(queues: dict[str, str]) -> dict[str, End]:
    """How each of these jobs (id -> queue) ended, for those whose end Redis or a dead letter shows."""
    waiting = _in_outbox(list(queues))  # read before Redis: a row gone later was pushed before
    statuses = results.statuses(queues)
    unsure = [job_id for job_id in queues if statuses.get(job_id) in (None, "", Status.FAILED.value)]
    dead = set(DeadLetter.objects.filter(job_id__in=unsure).values_list("job_id", flat=True))
    ends: dict[str, End] = {}
    for job_id in queues:
        status = statuses.get(job_id)
        if status == Status.FINISHED.value:
            ends[job_id] = SUCCEEDED, ""
        elif status == Status.CANCELED.value:
            ends[job_id] = ENDED, BatchMember.Reason.CANCELLED
        elif job_id in dead:
            ends[job_id] = ENDED, BatchMember.Reason.DEAD_LETTERED
        elif job_id in statuses and not status and job_id not in waiting:
            ends[job_id] = ENDED, BatchMember.Reason.EXPIRED
    return ends


def _in_outbox(ids: list[str]) -> set[str]:
    return {
        pk
        for alias in outbox_aliases()
        for pk in OutboxEntry.objects.using(alias).filter(pk__in=ids).values_list("pk", flat=True)
    }


def prune(limit: int = 1000) -> int:
    """Delete, with their members and callbacks, up to ``limit`` batches that ended longer than
    ``JOBS["BATCH_RETENTION"]`` ago and whose callbacks are settled (ran or skipped; one whose job is
    still on its way, retrying or dead-lettered, keeps its batch: its run needs the row); returns how
    many batches went."""
    cutoff = timezone.now() - dt.timedelta(seconds=jobs_settings.BATCH_RETENTION)
    unsettled = BatchCallback.objects.filter(batch_id=OuterRef("pk")).exclude(state__in=SETTLED_CALLBACKS)
    stale = list(
        Batch.objects.exclude(status=Batch.Status.OPEN)
        .filter(finished_at__lt=cutoff)
        .exclude(Exists(unsettled))
        .values_list("pk", flat=True)[:limit]
    )
    if not stale:
        return 0
    _, deleted = Batch.objects.filter(pk__in=stale).delete()  # members and callbacks by cascade
    return deleted.get(Batch._meta.label, 0)


# --- requeued members ----------------------------------------------------------------------------


def _on_requeued(sender: str, dead_letter: DeadLetter, job_id: str, **kwargs: Any) -> None:
    """A member requeued from its dead letter before its batch fired is pending again, as the new job;
    after the batch fired, the new job runs on its own and the batch stays as it ended."""
    old = dead_letter.job_id
    batch_id = BatchMember.objects.filter(job_id=old).values_list("batch_id", flat=True).first()
    if batch_id is None:
        return  # no member: one indexed read
    with transaction.atomic():
        if Batch.objects.select_for_update().filter(pk=batch_id, status=Batch.Status.OPEN).first() is None:
            return
        state = BatchMember.objects.filter(job_id=old).values_list("state", flat=True).first()
        if state not in (PENDING, ENDED):
            return  # it succeeded once: that end stands
        BatchMember.objects.filter(job_id=old).update(job_id=job_id, state=PENDING, reason="", ended_at=None)
        if state == ENDED:
            Batch.objects.filter(pk=batch_id).update(ended=F("ended") - 1)


job_requeued.connect(_on_requeued, dispatch_uid="django_jobs.batches")
