"""The supervisor's periodic duties for one Redis server, scheduled: each duty is a module of
``duties`` with its own interval, run in the order below, each isolated from the others.

Every ``runjobs`` runs all of them, so no duty waits on one elected process, and each step is
an atomic script or an idempotent write, so two ``runjobs`` doing the same step cannot double it.

Every loop makes progress past what it cannot handle. Items are handled one by one; an item that
fails because a service is down waits behind the others and is retried later; an item that can
never be handled (unreadable bytes, an id that breaks the id rule, a hash that vanished, the same
failure twice) is quarantined: written as a dead letter with its raw data, then removed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from django_jobs.core import execution
from django_jobs.store import Store
from django_jobs.worker.duties import ledger as ledger_duties
from django_jobs.worker.duties.alerts import Alerts
from django_jobs.worker.duties.base import UNREACHABLE, Duty, Scope, guarded
from django_jobs.worker.duties.batches import BatchSweep
from django_jobs.worker.duties.cron import Cron
from django_jobs.worker.duties.dying import Dying
from django_jobs.worker.duties.foreign import ForeignFailures
from django_jobs.worker.duties.parked import Parked
from django_jobs.worker.duties.prunes import BatchPrune, HistoryPrune, KeyPrune
from django_jobs.worker.duties.reaper import Reaper
from django_jobs.worker.duties.relay import Relay
from django_jobs.worker.duties.structures import Structures
from django_jobs.worker.duties.vanished import Vanishing
from django_jobs.worker.ledger import Ledger


class Maintenance:
    """The duties of one Redis server: ``queues`` are the ones this runjobs serves there. The relay,
    the ledger and the periodic jobs cover every queue of ``RQ_QUEUES`` on that server; the ``lead``
    server's maintenance (the first one's) also prunes idempotency keys and old batches, and takes the
    outbox rows and periodic jobs of queues missing from ``RQ_QUEUES``, so each is done once per runjobs.

    The duties are attributes too, so a caller (or a test) can run one alone."""

    def __init__(self, store: Store, queues: Sequence[str], interval: float, *, lead: bool = True) -> None:
        self.scope = scope = Scope(store, list(queues), interval, lead)
        self.reaper, self.structures, self.relay = Reaper(scope), Structures(scope), Relay(scope)
        self.ledger = Ledger(store, self.relay.relay_rows, scope.owns)
        self.dying, self.vanished, self.parked = Dying(scope), Vanishing(scope), Parked(scope)
        self.foreign = ForeignFailures(scope)
        self.cron = Cron(scope)
        self.duties: list[Duty] = [
            self.reaper,
            self.structures,  # before the relay, whose pushes a broken key would fail
            ledger_duties.Settle(scope, self.ledger),  # before the relay: rows of jobs that started go
            self.relay,
            ledger_duties.WatchPrimary(scope, self.ledger),
            ledger_duties.Sweep(scope, self.ledger),
            self.dying,
            self.foreign,
            self.vanished,
            self.parked,
            BatchSweep(scope),
            KeyPrune(scope),
            BatchPrune(scope),
            HistoryPrune(scope),
            Alerts(scope),
            self.cron,
        ]
        self.due = [0.0] * len(self.duties)  # monotonic: when each duty runs next

    @property
    def lead(self) -> bool:
        return self.scope.lead

    def tick(self) -> None:
        """Run the duties that are due, each guarded: one raising is logged and retried at its next
        turn, never stopping the others. One that finds Redis unreachable ends the pass: its error
        is raised, and the caller sets the server aside until it answers again."""
        execution.db_hygiene()  # a connection an outage broke is reopened, not failed on forever
        now = time.monotonic()
        for n, duty in enumerate(self.duties):
            if now < self.due[n]:
                continue
            self.due[n] = now + duty.interval
            failed = guarded(duty.name, duty.run)
            if isinstance(failed, UNREACHABLE):
                self.ledger.lost_contact()
                raise failed
