"""``manage.py jobs list | show ID | why ID``: the job browser on the command line.

``list`` prints a table with headers, or with ``--json`` one JSON object per line (JSON lines), each
with at least ``id``, ``name``, ``queue`` and ``state``. Bad arguments and unknown ids are one-line
errors with a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_jobs.core import results
from django_jobs.core.connections import queue_configs
from django_jobs.exceptions import JobDoesNotExist
from django_jobs.management.arguments import job_id, whole
from django_jobs.ops import browse, why
from django_jobs.ops.browse import STATE_NAMES, UNLISTED, Row


def _state(text: str) -> str:
    if text not in STATE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown state {text[:40]!r} (one of: {', '.join(STATE_NAMES)})")
    if STATE_NAMES[text] in UNLISTED:
        raise argparse.ArgumentTypeError(f"{text} jobs are not listed: look one up by id (jobs why ID)")
    return text


class Command(BaseCommand):
    help = "List jobs by queue, state and name; show one job; say why a job is not running."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="{list,show,why}")
        listing = commands.add_parser("list", help="Jobs by queue and state, in the order they run.")
        listing.add_argument(
            "--queue", action="append", default=[], help="A queue (repeatable; default: all)."
        )
        listing.add_argument(
            "--state", action="append", type=_state, default=[], help="A lifecycle state (repeatable)."
        )
        listing.add_argument("--name", default="", help="Only jobs of this job name.")
        listing.add_argument(
            "--arg",
            default=None,
            help="Only jobs with an argument of this value (17 finds f(17) and f(account=17)).",
        )
        listing.add_argument("--limit", type=whole(1, 10_000), default=50, help="At most this many (50).")
        listing.add_argument(
            "--look",
            type=whole(1, 10_000_000),
            default=10_000,
            help="Members of Redis structures read at most while filtering (10,000).",
        )
        listing.add_argument("--json", action="store_true", help="One JSON object per job, one per line.")
        for name, text in (("show", "Everything known about one job."), ("why", "Why it is not running.")):
            one = commands.add_parser(name, help=text)
            one.add_argument("id", type=job_id, metavar="ID")

    def handle(self, *args: Any, command: str, **options: Any) -> None:
        try:
            getattr(self, f"_{command}")(**options)
        except JobDoesNotExist as exc:
            raise CommandError(str(exc), returncode=1) from None
        except RedisError as exc:
            raise CommandError(f"Redis did not answer: {exc}", returncode=1) from None

    def _list(self, queue: list[str], state: list[str], **options: Any) -> None:
        known = list(queue_configs())
        unknown = [q for q in queue if q not in known]
        if unknown:
            raise CommandError(f"unknown queue {unknown[0]!r} (known: {', '.join(known) or 'none'})")
        states = frozenset(STATE_NAMES[s] for s in state) or frozenset(set(STATE_NAMES.values()) - UNLISTED)
        query = browse.Query(options["name"], options["arg"])
        found = browse.jobs(queue or known, states, query, options["limit"], options["look"])
        if options["json"]:
            for row in found.rows:
                self.stdout.write(json.dumps(_json(row)))
            return
        table = [("ID", "NAME", "QUEUE", "STATE", "DETAIL")]
        table += [(row.id, row.name, row.queue, row.state_name, row.detail()) for row in found.rows]
        widths = [max(len(line[i]) for line in table) for i in range(4)]
        for *cells, detail in table:
            padded = (cell.ljust(width) for cell, width in zip(cells, widths, strict=True))
            self.stdout.write("  ".join([*padded, detail]).rstrip())
        if not found.complete:
            self.stderr.write(f"(read {found.looked} members: more may match; raise --limit or --look)")

    def _show(self, id: str, **options: Any) -> None:
        state = results.get_job(id)
        fields = {
            "id": state.id,
            "name": state.name,
            "queue": state.queue,
            "state": state.state.name.lower() if state.state else "unknown",
            "status": state.status.value if state.status else "unknown",
            "attempts": state.attempts,
            "enqueued at": state.enqueued_at,
            "due at": state.due_at,
            "started at": state.started_at,
            "finished at": state.finished_at,
            "workers": ", ".join(state.worker_ids),
            "why": state.why,
        }
        for label, value in fields.items():
            if value not in (None, ""):
                self.stdout.write(f"{label:<12} {value}")
        for error in state.errors:
            self.stdout.write(f"{'error':<12} attempt {error.attempt}: {error.exception}: {error.message}")

    def _why(self, id: str, **options: Any) -> None:
        self.stdout.write(why.why(id))


def _json(row: Row) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": row.id,
        "name": row.name,
        "queue": row.queue,
        "state": row.state_name,
        "detail": row.detail(),
    }
    if row.where is not None and row.where.due is not None:
        found["due"] = row.where.due
    return found
