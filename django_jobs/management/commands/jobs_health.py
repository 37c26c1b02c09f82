"""``manage.py jobs_health``: a liveness or readiness probe that exits non-zero when jobs cannot flow."""

from __future__ import annotations

import socket
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError, connections
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core.connections import connection_identity, queue_configs, server_connections, server_stores
from django_jobs.exceptions import ConfigurationError
from django_jobs.flow.pausing import describe, paused
from django_jobs.management.arguments import real
from django_jobs.ops import durability
from django_jobs.ops.collectors import dead_letter_counts, open_dead_letters
from django_jobs.ops.eviction import eviction_policy
from django_jobs.ops.inspection import QueueState, WorkerState, read_all
from django_jobs.store import audit
from django_jobs.store.replication import Primary

CHECKS = (
    "database",
    "redis",
    "workers",
    "age",
    "eviction",
    "quarantine",
    "deadletters",
    "durability",
    "paused",
)
#: Seconds the oldest due ledger row may wait before the durability line warns.
LEDGER_WARN_AGE = 1800.0


class Command(BaseCommand):
    help = (
        "Exit non-zero if a database or Redis does not answer, a queue has no live runjobs, or a "
        "running queue's oldest job waited longer than --max-age. Warn (exit 0) about a foreign worker "
        "(an rqworker) on a queue, a Redis that may evict jobs, quarantined or vanished items, open dead "
        "letters, a ledger that does not drain and paused queues and job types; report each queue's "
        "durability level and its Redis' replicas. One line per check."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queues", nargs="*", help="Queues to check (default: all).")
        parser.add_argument(
            "--max-age",
            type=real(0),
            default=600.0,
            help="Seconds the oldest queued job may have waited (default 600).",
        )
        parser.add_argument(
            "--skip",
            action="append",
            choices=CHECKS,
            default=[],
            help="Leave a check out, e.g. --skip workers in a web server's readiness probe. Repeatable.",
        )
        parser.add_argument(
            "--audit",
            action="store_true",
            help="Instead of the checks, audit what Redis holds against the jobs' lifecycle (read-only): "
            "one line per problem, exit 1 if any.",
        )
        parser.add_argument(
            "--budget",
            type=int,
            default=audit.BUDGET,
            help=f"With --audit: members and keys looked at per Redis server (default {audit.BUDGET}).",
        )
        parser.add_argument(
            "--local",
            action="store_true",
            help="Count only workers on this host (a worker's liveness probe).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queues = options["queues"] or sorted(queue_configs())
        try:
            for queue in queues:
                connection_identity(queue)  # raises for a queue missing from RQ_QUEUES
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        if options["audit"]:
            self._audit(queues, options["budget"])
            return
        skip = set(options["skip"])
        failures = []
        if "database" not in skip:
            failures += self._databases()
        if not {"redis", "workers", "age"} <= skip:
            failures += self._queues(queues, skip, options["max_age"], options["local"])
        if "eviction" not in skip:
            self._eviction(queues)
        if "quarantine" not in skip:
            self._quarantine()
        if "deadletters" not in skip:
            self._dead_letters(queues)
        if "durability" not in skip:
            self._durability(queues)
        if "paused" not in skip:
            self._paused(queues)
        if failures:
            raise CommandError(f"unhealthy: {'; '.join(failures)}", returncode=1)

    def _report(self, ok: bool, check: str, detail: str) -> list[str]:
        detail = " ".join(detail.split())  # driver errors span lines; a probe's log wants one
        self.stdout.write(f"{'ok  ' if ok else 'FAIL'} {check}: {detail}")
        return [] if ok else [f"{check}: {detail}"]

    def _warn_unless(self, ok: bool, check: str, detail: str) -> None:
        """A finding an operator must act on that does not stop jobs from flowing: exit code unchanged."""
        self.stdout.write(f"{'ok  ' if ok else 'WARN'} {check}: {' '.join(detail.split())}")

    def _audit(self, queues: list[str], budget: int) -> None:
        """Each problem the auditor finds on the servers of ``queues``, one line each; exit 1 if any."""
        found = 0
        for names, store in server_stores(queues):
            shown = ", ".join(names)
            try:
                result = audit.audit(store, names, budget=budget)
            except RedisError as exc:
                raise CommandError(f"audit: {shown}: Redis did not answer: {exc}", returncode=2) from exc
            for problem in result.problems:
                self.stdout.write(f"FAIL audit: {problem}")
            found += len(result.problems)
            looked = f"{result.looked} members and keys looked at"
            if not result.complete:
                self.stdout.write(f"WARN audit: {shown}: the budget ({budget}) cut the look short ({looked})")
            else:
                self.stdout.write(f"{'ok  ' if result.ok else 'FAIL'} audit: {shown}: {looked}")
        if found:
            raise CommandError(f"audit: {found} problem(s)", returncode=1)

    def _eviction(self, queues: list[str]) -> None:
        for _names, connection in server_connections(queues):
            try:
                found = eviction_policy(connection)
            except RedisError:
                continue  # the redis check says so
            self._warn_unless(not (found.evicts or found.unknown), "eviction", found.describe())

    def _quarantine(self) -> None:
        try:
            _, counts = dead_letter_counts()
        except DatabaseError:
            return  # the database check says so
        detail = ", ".join(f"{count} {reason}" for reason, count in counts.items())
        if any(counts.values()):
            detail += " (open dead letters no job ran for: see the dead-letter admin)"
        self._warn_unless(not any(counts.values()), "quarantine", detail)

    def _foreign(self, queues: list[str], foreign: list[WorkerState]) -> None:
        """A foreign worker (an rqworker) on a checked queue fails every django_jobs job it takes."""
        found = [w for w in foreign if w.served & set(queues)]
        for worker in found:
            where = f"{worker.name} on {worker.hostname or '?'} (pid {worker.pid or '?'})"
            harm = "it fails the django_jobs jobs it takes (runjobs dead-letters them); stop it"
            self._warn_unless(False, "foreign", f"{where} serves {worker.queues}, not being runjobs: {harm}")
        if not found:
            self._warn_unless(True, "foreign", "no foreign worker")

    def _dead_letters(self, queues: list[str]) -> None:
        """Open dead letters: jobs that failed for good and wait for an operator (a warning: jobs
        still flow)."""
        try:
            found = open_dead_letters(queues)
        except DatabaseError:
            return  # the database check says so
        total = sum(n for _, n, _ in found)
        if not total:
            self._warn_unless(True, "deadletters", "none open")
            return
        oldest = min(at for _, _, at in found)
        shown = ", ".join(f"{n} {name}" for name, n, _ in found[:5]) + (", ..." if len(found) > 5 else "")
        self._warn_unless(
            False,
            "deadletters",
            f"{total} open ({shown}), the oldest since {oldest:%Y-%m-%d %H:%M} UTC: requeue or discard "
            "them in the dead-letter admin or with manage.py deadletters",
        )

    def _durability(self, queues: list[str]) -> None:
        """Each queue's level and ledger; each server's replicas, lag and last primary change."""
        try:
            ledger = {state.queue: state for state in durability.ledger()}
        except DatabaseError:
            ledger = {}  # the database check says so
        for queue in queues:
            detail = f"{queue}: {jobs_settings.durability(queue)}"
            state = ledger.get(queue)
            if state is not None:
                detail += f", {state.pending} ledger row(s) pending"
                detail += f", oldest due {state.oldest_age:.0f} s ago" if state.pending else ""
            ok = state is None or state.oldest_age <= LEDGER_WARN_AGE
            self._warn_unless(ok, "durability", detail + ("" if ok else " (the ledger does not drain)"))
        for names, primary in durability.replication(queues):
            if not isinstance(primary, RedisError):  # else the redis check says so
                self._warn_unless(True, "replication", f"{', '.join(names)}: {_replication(primary)}")

    def _paused(self, queues: list[str]) -> None:
        """Each pause of these queues and of any job type: deliberate, so a warning, never a failure."""
        try:
            found = [p for p in paused() if p.kind == "job" or p.name in queues]
        except RedisError:
            return  # the redis check says so
        for one in found:
            self._warn_unless(False, "paused", describe(one, time.time()))
        if not found:
            self._warn_unless(True, "paused", "nothing")

    def _databases(self) -> list[str]:
        failures = []
        for alias in connections:
            try:
                with connections[alias].cursor() as cursor:
                    cursor.execute("SELECT 1")
            except DatabaseError as exc:
                failures += self._report(False, "database", f"{alias}: {exc}")
            else:
                failures += self._report(True, "database", alias)
        return failures

    def _queues(self, queues: list[str], skip: set[str], max_age: float, local: bool) -> list[str]:
        stats: list[QueueState] = []
        workers: list[WorkerState] = []
        failures: list[str] = []
        for names, _, part in read_all(queues):  # a server that is down fails only its own queues
            if isinstance(part, RedisError):
                failures += self._report(False, "redis", f"{part} (queues {', '.join(names)})")
                continue
            if "redis" not in skip:
                failures += self._report(True, "redis", ", ".join(names))
            stats += part.queues
            workers += [w for w in part.workers if w.state]
        if "foreign" not in skip:
            self._foreign(queues, [w for w in workers if w.foreign])
        workers = [w for w in workers if not w.foreign]  # it serves no django_jobs job
        if local:
            workers = [w for w in workers if w.hostname == socket.gethostname()]
        for queue in stats:
            if "workers" not in skip:
                serving = sum(queue.name in w.served for w in workers)
                failures += self._report(bool(serving), "workers", f"{queue.name}: {serving} live")
            if "age" not in skip:
                age = queue.oldest_age or 0.0
                detail = f"{queue.name}: oldest job waited {age:.0f} s (limit {max_age:g})"
                paused_queue = queue.paused is not None  # its jobs wait on purpose: the pause line says so
                failures += self._report(
                    age <= max_age or paused_queue, "age", detail + (", paused" if paused_queue else "")
                )
        return failures


def _replication(primary: Primary) -> str:
    lag = "no replica" if primary.lag is None else f"{primary.replicas} replica(s), lag {primary.lag:g} s"
    changed = "never" if primary.changed_at is None else f"{time.time() - primary.changed_at:.0f} s ago"
    return f"{primary.role}, {lag}, primary last changed {changed}"
