"""The ledger of "ledger" queues: each job's outbox row lives until the job has finished, and
``runjobs`` reconciles the rows with Redis, so a job Redis acknowledged and then lost (a failover to
a replica that lagged, a restart without the last writes) is pushed again: it may run twice, never
zero times.

* Settling: the supervisor hears of every attempt its work processes start, and of every attempt
  whose code returned. A returned job has run: its row is deleted within a tenth of a second, in
  bulk, by the database alone (Redis may be failing over meanwhile), so a failover that brings the
  job back finds no row (``rerun``). For the others, once a second those jobs' statuses are read in
  one round trip and the rows of finished ones (finished, cancelled, or dead-lettered: their
  ``DeadLetter`` row exists) are deleted in bulk. The work process's hot path pays nothing.
* Sweeping: every ``LEDGER_SWEEP_INTERVAL`` seconds, every pending row older than a second is
  checked: O(pending rows), never O(history). A row whose job is gone from Redis is pushed again; one
  whose job finished is deleted. The rows are walked in id order, a page at a time, and each
  maintenance pass takes at most ``STEP_SECONDS`` of pages: a backlog of a million rows never holds
  up the supervisor's loop (the reports it reads, the deadlines it enforces). A sweep that took long
  pushes the next one back, so reconciling never takes more than a tenth of the time. A sweep comes
  at once (a walk under way starts over), and takes the fresh rows too
  (their pushes may be lost as well), when the Redis primary changed (another ``run_id`` or
  replication id: a failover or a restart), when its record of the primary is gone (its data was
  flushed, which keeps the identity), and when Redis answers again after an outage.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connections
from django.utils import timezone
from redis.exceptions import RedisError

from django_jobs import conf
from django_jobs.conf import LEDGER, REPLICATED, jobs_settings
from django_jobs.core import results
from django_jobs.models import DeadLetter, OutboxEntry, outbox_aliases
from django_jobs.ops.durability import ledger_queues
from django_jobs.store import Status, Store
from django_jobs.store.replication import note_primary, read_primary
from django_jobs.telemetry import metrics

logger = logging.getLogger("django_jobs.worker")

#: Statuses after which a job never runs again: its row can go.
FINAL = frozenset({Status.FINISHED.value, Status.CANCELED.value})
#: Rows read per step of a sweep, and ids checked per settling pass.
BATCH = 500
#: Batches of ids one settling pass checks at most.
SETTLE_BATCHES = 20
#: Attempts remembered for settling; past it the oldest are forgotten (a sweep finds their rows).
WATCH_LIMIT = 100_000
#: A sweep waits at least this many times its own duration before the next one.
SWEEP_DUTY = 10
#: Seconds of pages a sweep reads per maintenance pass, at most (plus one page).
STEP_SECONDS = 0.02


def _chunks(items: Sequence[str], size: int = 900) -> Iterable[Sequence[str]]:
    """Under SQLite's older 999-parameter limit."""
    return (items[start : start + size] for start in range(0, len(items), size))


@dataclass
class Walk:
    """One sweep under way: the rows of ``queues`` created before ``cutoff``, in each outbox of
    ``aliases`` in turn, in id order from ``after`` on; the queues found ``down`` are left for the
    next sweep. ``took``: seconds its steps took so far."""

    queues: list[str]
    cutoff: dt.datetime
    aliases: list[str]
    started: float
    after: str = ""
    down: set[str] = field(default_factory=set)
    took: float = 0.0


class Ledger:
    """Settles and reconciles the ledger rows of one Redis server's queues (``owns(queue)``);
    ``relay`` pushes rows the way the outbox relay does (grouped, one bad row isolated and
    quarantined) and returns the queues whose Redis was down."""

    def __init__(
        self,
        store: Store,
        relay: Callable[[str, list[OutboxEntry]], set[str]],
        owns: Callable[[str], bool] = lambda queue: True,
    ) -> None:
        self.store, self.relay, self.owns = store, relay, owns
        self.watched: dict[str, str] = {}  # job id -> queue, of attempts started under this runjobs
        self.returned: dict[str, str] = {}  # job id -> queue, of attempts whose code returned here
        self.raised: dict[str, str] = {}  # job id -> queue, of attempts whose code raised here, settled
        self.started: set[str] = set()  # ids of "replicated" jobs that started here since the last settling
        self.on_change: Callable[[], None] = lambda: None  # hears that the primary changed or is back
        self.identity: tuple[str, str] | None = None
        self.reachable = True
        self.sweep_at = 0.0  # monotonic; 0: as soon as possible
        self.walk: Walk | None = None  # the sweep under way, if any
        # whether the next sweep takes rows younger than a second too: the first does (nothing says their
        # pushes landed; pushing a job Redis holds again does nothing)
        self.sweep_fresh = True

    def saw(self, started: Iterable[tuple[str, str]]) -> None:
        """Attempts of these (job id, queue) started here: settle their rows once the jobs have finished
        ("ledger"), or at the next settling ("replicated": a job that started needs no row to reach Redis,
        and a row left behind could create it anew once its hash expired)."""
        current = conf.current()  # read once per batch: the supervisor hands them over per pass
        for job_id, queue in started:
            level = current.durability(queue)
            if level == LEDGER:
                _remember(self.watched, job_id, queue)
            elif level == REPLICATED:
                self.started.add(job_id)

    def ran(self, returned: Iterable[tuple[str, str]], raised: Iterable[tuple[str, str]] = ()) -> None:
        """The code of the ``returned`` (job id, queue) attempts returned here: their jobs ran, whatever
        Redis says (or loses) next, so their rows go at the next :meth:`settle_ran`, with no status read.
        The code of the ``raised`` ones raised, and their failure is settled: the rows of those that
        are dead-lettered go then too."""
        current = conf.current()
        for job_id, queue in returned:
            if current.durability(queue) == LEDGER:
                self.watched.pop(job_id, None)
                _remember(self.returned, job_id, queue)
        for job_id, queue in raised:
            if current.durability(queue) == LEDGER:
                _remember(self.raised, job_id, queue)

    def settle_ran(self) -> None:
        """Delete the rows of the jobs whose code returned, and of those whose code raised that are
        dead-lettered (the others keep theirs, watched: a retry runs again), by the database alone; if it
        fails, they wait for the next call."""
        ran, self.returned = self.returned, {}
        raised, self.raised = self.raised, {}
        try:
            dead = _dead_lettered(sorted(raised))
            _delete([*ran, *dead], {**ran, **raised})
        except DatabaseError:
            for job_id, queue in [*ran.items(), *raised.items()]:
                _remember(self.returned if job_id in ran else self.raised, job_id, queue)
            raise
        for job_id in dead:
            self.watched.pop(job_id, None)

    def lost_contact(self) -> None:
        """Redis did not answer: once it does again, sweep (rows committed meanwhile were not pushed)."""
        self.reachable = False

    # --- settling what ran here ------------------------------------------------------------------

    def settle(self) -> None:
        """Delete the rows of "replicated" jobs that started and of watched jobs that finished; forget
        those another attempt will report."""
        _drop(sorted(self.started))  # if the database fails, they wait for the next settling
        self.started.clear()
        head = list(itertools.islice(self.watched, BATCH * SETTLE_BATCHES))
        for start in range(0, len(head), BATCH):
            queues = {job_id: self.watched.pop(job_id) for job_id in head[start : start + BATCH]}
            statuses = results.statuses(queues)
            done = _finished(statuses)
            _delete(done, queues)
            for job_id, status in statuses.items():  # still running, or being dead-lettered: look again
                if job_id not in done and status in (Status.STARTED.value, Status.FAILED.value):
                    self.watched.setdefault(job_id, queues[job_id])

    # --- the primary and the sweep ---------------------------------------------------------------

    def watch_primary(self) -> None:
        """Sweep now when this runjobs' Redis is another server, lost its data, or is back."""
        try:
            primary = read_primary(self.store)
            changed, _ = note_primary(self.store, primary)
        except RedisError:
            self.reachable = False
            raise
        identity = (primary.run_id, primary.replid)
        if changed or (self.identity is not None and identity != self.identity):
            logger.warning(
                "Redis primary changed (run_id %s, replication id %s): reconciling the ledger now.",
                primary.run_id, primary.replid,
            )  # fmt: skip
            self._sweep_now()
        elif self.identity is not None and not primary.recorded:
            logger.warning(
                "Redis lost its data (its record of the primary is gone): reconciling the ledger now."
            )
            self._sweep_now()
        elif not self.reachable:
            self._sweep_now()  # rows committed while it was down were not pushed
        self.identity, self.reachable = identity, True

    def _sweep_now(self) -> None:
        """Sweep at the next turn, from the first row, rows of the last second too: Redis may have lost
        their pushes (and may hand out again jobs that already ran: ``on_change`` hears of it)."""
        self.sweep_at, self.sweep_fresh, self.walk = 0.0, True, None
        self.on_change()

    def sweep_if_due(self) -> None:
        """One step of the sweep: the next ``STEP_SECONDS`` of pages of the walk under way, or of a
        new one once it is due."""
        if self.walk is None:
            now = time.monotonic()
            if now < self.sweep_at:
                return
            self.sweep_at = now + jobs_settings.LEDGER_SWEEP_INTERVAL  # a failing sweep waits its turn too
            fresh, self.sweep_fresh = self.sweep_fresh, False
            self.walk = self._walk(fresh)
        self._step(self.walk, STEP_SECONDS)

    def sweep(self, fresh: bool = False) -> None:
        """Reconcile, now and whole, every pending ledger row of this server's queues older than a
        second (``fresh``: every one) with Redis."""
        self._step(self._walk(fresh), math.inf)

    def _walk(self, fresh: bool) -> Walk:
        # Fresh rows are still being pushed: pushing one again is harmless (a push of a job Redis
        # holds does nothing), only wasted while Redis lost nothing.
        cutoff = timezone.now() - dt.timedelta(seconds=0 if fresh else 1)
        queues = [queue for queue in ledger_queues() if self.owns(queue)]
        return Walk(queues, cutoff, outbox_aliases() if queues else [], time.monotonic())

    def _step(self, walk: Walk, budget: float) -> None:
        """Read and reconcile pages of ``walk`` for about ``budget`` seconds, or until it is over; then
        the next sweep is set no earlier than ``SWEEP_DUTY`` times the walk's own time after its start.
        A page is moved past before it is reconciled: one that fails is never read again and again."""
        began = time.monotonic()
        try:
            while walk.aliases:
                alias = walk.aliases[0]
                queues = [queue for queue in walk.queues if queue not in walk.down]
                rows = OutboxEntry.objects.using(alias).filter(
                    queue__in=queues, created_at__lt=walk.cutoff, pk__gt=walk.after
                )
                page = list(rows.order_by("pk").values_list("pk", "queue")[:BATCH])
                walk.after = page[-1][0] if len(page) == BATCH else ""
                if not walk.after:
                    walk.aliases.pop(0)
                if page:
                    walk.down |= self._reconcile(alias, dict(page))
                if time.monotonic() - began >= budget:
                    break
        finally:
            walk.took += time.monotonic() - began
        if not walk.aliases and self.walk is walk:
            self.walk = None
            self.sweep_at = walk.started + max(jobs_settings.LEDGER_SWEEP_INTERVAL, SWEEP_DUTY * walk.took)

    def _reconcile(self, alias: str, queues: dict[str, str]) -> set[str]:
        """Delete the rows of finished jobs, push again those missing from Redis; returns the queues
        whose Redis did not answer (the rest of the sweep leaves them alone)."""
        statuses = results.statuses(queues)  # a row of an unknown queue is the relay's to quarantine
        done = _finished(statuses)
        missing = [job_id for job_id, status in statuses.items() if status is None and job_id not in done]
        down: set[str] = set()
        if missing:
            rows = list(OutboxEntry.objects.using(alias).filter(pk__in=missing))
            down = self.relay(alias, rows)
            pushed = [row for row in rows if row.queue not in down]
            if pushed:
                logger.warning(
                    "Ledger: %d job(s) missing from Redis were pushed again (a failover or a lost push): "
                    "%s", len(pushed), ", ".join(row.pk for row in pushed[:10]),
                )  # fmt: skip
            for queue, count in Counter(row.queue for row in pushed).items():
                metrics.ledger(queue, repushed=count)
        _delete(done, queues)
        return down


def _remember(jobs: dict[str, str], job_id: str, queue: str) -> None:
    """Add one attempt's job to ``jobs``, forgetting the oldest past ``WATCH_LIMIT`` (a sweep finds
    its row)."""
    if len(jobs) >= WATCH_LIMIT and job_id not in jobs:
        jobs.pop(next(iter(jobs)))
    jobs[job_id] = queue


def _finished(statuses: dict[str, str | None]) -> set[str]:
    """The jobs that will never run again: finished or cancelled in Redis, or dead-lettered."""
    done = {job_id for job_id, status in statuses.items() if status in FINAL}
    unsure = [job_id for job_id, status in statuses.items() if status in (None, Status.FAILED.value)]
    return done | _dead_lettered(unsure)


def _dead_lettered(ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` whose ``DeadLetter`` row exists."""
    dead: set[str] = set()
    for chunk in _chunks(ids):
        dead.update(DeadLetter.objects.filter(job_id__in=chunk).values_list("job_id", flat=True))
    return dead


def _drop(ids: Sequence[str]) -> None:
    """Delete the rows of ``ids`` from every outbox, in bulk: one plain ``DELETE ... IN`` per chunk
    (the ORM's would prepare each id as a lookup value, a third of the supervisor's time per job)."""
    meta = OutboxEntry._meta
    for alias in outbox_aliases() if ids else ():
        connection = connections[alias]
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            for chunk in _chunks(ids):
                places = ", ".join(["%s"] * len(chunk))
                cursor.execute(
                    f"DELETE FROM {quote(meta.db_table)} WHERE {quote(meta.pk.attname)} IN ({places})", chunk
                )


def _delete(done: Iterable[str], queues: dict[str, str]) -> None:
    """Delete the rows of ``done`` jobs from every outbox, in bulk; count them per queue."""
    ids = sorted(done)
    if not ids:
        return
    _drop(ids)
    for queue, count in Counter(queues.get(job_id, "") for job_id in ids).items():
        metrics.ledger(queue, settled=count)
