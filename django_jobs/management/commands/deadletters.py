"""``manage.py deadletters``: the dead-letter dashboard for an operator without a browser.

The same filters, the same service functions, the same permissions and the same audit trail as the
admin: a change made here shows in the admin's history under the operator's name.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count, Max, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from django_jobs.conf import jobs_settings
from django_jobs.failures import deadletter, redaction, selection
from django_jobs.management.arguments import audited_user, real, user_argument, whole
from django_jobs.models import DeadLetter

FILTER_OPTIONS = ("job", "exception", "queue", "status", "reason", "group", "since", "until", "search")
LIST_FIELDS = ("pk", "status", "created_at", "job_name", "queue", "exception", "attempts", "message")
ENTRY_LINE = "{pk:>7}  {status:<9}  {created_at:%Y-%m-%d %H:%M}  {job_name}  {queue}  {exception}  {message}"
GROUP_LINE = (
    "{fingerprint:<16}  {entries:>6} ({open} open)  {last_seen:%Y-%m-%d %H:%M}  {name}  {exception_class}"
    "  {frame}"
)
#: The first line of a text listing, its columns' names over their columns (times in UTC).
ENTRY_HEADER = f"{'ID':>7}  {'STATUS':<9}  {'CREATED (UTC)':<16}  JOB  QUEUE  EXCEPTION  MESSAGE"
GROUP_HEADER = f"{'GROUP':<16}  {'DEAD':>6} (OPEN)  {'LAST (UTC)':<16}  JOB  EXCEPTION  WHERE"
_AGO = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def moment(text: str) -> dt.datetime:
    """``2h``/``30m``/``7d`` ago, an ISO date, or an ISO datetime (naive means the current time zone)."""
    try:
        when = _moment(text)
        when.astimezone(dt.UTC)  # the database compares in UTC: a time out of its range fails here
    except (OverflowError, ValueError) as exc:
        raise ArgumentTypeError(
            f"{text[:40]!r} is not a time in range (use 2h, 30m, 7d or an ISO time)"
        ) from exc
    return when


def _moment(text: str) -> dt.datetime:
    ago = _AGO.match(text)
    if ago:
        return timezone.now() - dt.timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    when = parse_datetime(text)
    if when is None:
        day = parse_date(text)
        if day is None:
            raise ValueError(text)
        when = dt.datetime.combine(day, dt.time())
    return when if timezone.is_aware(when) else timezone.make_aware(when)


def _filter_arguments(parser: ArgumentParser) -> None:
    group = parser.add_argument_group("filters (as in the admin's sidebar and search box)")
    group.add_argument("--job", default="", help="job name, exactly")
    group.add_argument("--exception", default="", help="exception class, exactly (e.g. builtins.ValueError)")
    group.add_argument("--queue", default="")
    group.add_argument("--status", default="", choices=["", *DeadLetter.Status.values])
    group.add_argument("--reason", default="", choices=["", *DeadLetter.Reason.values])
    group.add_argument("--group", default="", help="failure group (fingerprint), as 'list --by-group' shows")
    group.add_argument("--since", type=moment, help="last failure at or after: 2h, 30m, 7d or an ISO time")
    group.add_argument("--until", type=moment, help="last failure before this time")
    group.add_argument("--search", default="", help="words in the job id, message or arguments")


def _change_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("ids", nargs="*", type=whole(1), help="entry ids; or select with filters")
    _filter_arguments(parser)
    parser.add_argument("--all", action="store_true", help="act on every open entry when no filter is given")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    user_argument(parser)


class _Missing(dict[str, Any]):
    """A history item as format arguments; an attempt recorded without some key prints '?'."""

    def __missing__(self, key: str) -> str:
        return "?"


class Command(BaseCommand):
    help = "List, show, requeue or discard dead letters."

    def add_arguments(self, parser: ArgumentParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True)
        listing = commands.add_parser("list", help="list entries, newest first")
        _filter_arguments(listing)
        listing.add_argument("--limit", type=whole(0), default=50)
        listing.add_argument("--by-group", action="store_true", help="one line per failure group")
        listing.add_argument("--json", action="store_true", help="one JSON object per line")
        show = commands.add_parser("show", help="one entry in full, its payload redacted")
        show.add_argument("id", type=whole(1))
        requeue = commands.add_parser("requeue", help="send open entries back as new jobs, paced")
        _change_arguments(requeue)
        requeue.add_argument(
            "--rate", type=real(0, strictly=True), help="jobs per second (default: JOBS['REQUEUE_RATE'])"
        )
        discard = commands.add_parser("discard", help="mark open entries resolved without running them")
        _change_arguments(discard)

    def handle(self, *args: Any, **options: Any) -> None:
        getattr(self, f"_{options['command']}")(options)

    # --- reading -----------------------------------------------------------------------------------

    @staticmethod
    def _selected(options: dict[str, Any]) -> QuerySet[DeadLetter]:
        filters = selection.Filters(
            job_name=options["job"],
            exception=options["exception"],
            queue=options["queue"],
            status=options["status"],
            reason=options["reason"],
            fingerprint=options["group"],
            since=options["since"],
            until=options["until"],
            search=options["search"],
        )
        entries = DeadLetter.objects.all()
        if options.get("ids"):
            entries = entries.filter(pk__in=options["ids"])
        return filters.apply(entries)

    def _list(self, options: dict[str, Any]) -> None:
        entries = self._selected(options)
        if options["by_group"]:
            rows: list[dict[str, Any]] = list(selection.groups(entries)[: options["limit"]])
            line, header = GROUP_LINE, GROUP_HEADER
        else:
            rows = list(entries.values(*LIST_FIELDS)[: options["limit"]])
            line, header = ENTRY_LINE, ENTRY_HEADER
        if rows and not options["json"]:
            self.stdout.write(header)
        for row in rows:
            if options["json"]:
                self.stdout.write(json.dumps(row, default=str))
            else:
                self.stdout.write(line.format(**{**row, "message": str(row.get("message", ""))[:80]}))

    def _show(self, options: dict[str, Any]) -> None:
        try:
            entry = DeadLetter.objects.get(pk=options["id"])
        except DeadLetter.DoesNotExist:
            raise CommandError(f"No dead letter has id {options['id']}.") from None
        later = entry.later_failures.values_list("pk", flat=True)
        facts = [
            ("id", entry.pk),
            ("job id", entry.job_id),
            ("job", entry.job_name),
            ("queue", entry.queue),
            ("status", entry.status),
            ("reason", entry.get_reason_display()),
            ("attempts", entry.attempts),
            ("first failure", entry.first_failed_at),
            ("last failure", entry.created_at),
            ("exception", entry.exception),
            ("message", entry.message),
            ("raised at", entry.raised_at),
            ("failure group", entry.fingerprint),
            ("requeued as job", entry.requeued_job_id or "-"),
            ("requeued from entry", entry.requeued_from_id or "-"),
            ("failed again as entries", ", ".join(map(str, later)) or "-"),
        ]
        for label, value in facts:
            self.stdout.write(f"{label + ':':<25}{value}")
        self.stdout.write("\npayload (redacted):\n" + redaction.payload_json(entry))
        if entry.raw:
            self.stdout.write("\nRedis hash (redacted):\n" + redaction.raw_json(entry))
        self.stdout.write("\nattempts:")
        for item in entry.history:
            self.stdout.write("  {attempt}  {at}  {exception}: {message}".format_map(_Missing(item)))
        self.stdout.write("\n" + (entry.traceback or "(no traceback)"))

    # --- changing ----------------------------------------------------------------------------------

    def _confirmed(self, options: dict[str, Any], question: str) -> bool:
        if options["yes"]:
            return True
        if not sys.stdin.isatty():
            raise CommandError("Not a terminal: pass --yes to confirm.")
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")

    def _open(self, options: dict[str, Any]) -> tuple[QuerySet[DeadLetter], int]:
        """The open entries selected now, capped at the newest one counted, so the confirmed count
        is what gets changed even if more jobs die meanwhile."""
        if not (options["ids"] or options["all"] or any(options[name] for name in FILTER_OPTIONS)):
            raise CommandError("Name entry ids, give a filter, or pass --all to act on every open entry.")
        entries = self._selected(options).filter(status=DeadLetter.Status.OPEN)
        found = entries.aggregate(count=Count("pk"), through=Max("pk"))
        return entries.filter(pk__lte=found["through"] or 0), found["count"]

    def _requeue(self, options: dict[str, Any]) -> None:
        user = audited_user(options["user"], deadletter.REQUEUE_PERMISSION)
        rate = options["rate"] or jobs_settings.REQUEUE_RATE
        if rate <= 0:
            raise CommandError("--rate must be a positive number of jobs per second.")
        entries, count = self._open(options)
        if not count:
            self.stdout.write("No open dead letter matches.")
            return
        question = f"Requeue {count} open dead letter(s) at {rate:g} per second (about {count / rate:.0f} s)?"
        if not self._confirmed(options, question):
            self.stdout.write("Nothing requeued.")
            return
        done = deadletter.requeue(entries, actor=user, rate=rate)
        self.stdout.write(f"Requeued {len(done)} dead letter(s).")
        for name, skipped in done.unknown.items():
            self.stderr.write(f"{skipped} entry(ies) of {name!r} left open: no job has that name here.")
        for name, skipped in done.refused.items():
            self.stderr.write(f"{skipped} entry(ies) of {name!r} left open: {deadletter.REFUSED}.")

    def _discard(self, options: dict[str, Any]) -> None:
        user = audited_user(options["user"], deadletter.DISCARD_PERMISSION)
        entries, count = self._open(options)
        if not count:
            self.stdout.write("No open dead letter matches.")
            return
        if not self._confirmed(options, f"Discard {count} open dead letter(s)?"):
            self.stdout.write("Nothing discarded.")
            return
        self.stdout.write(f"Discarded {deadletter.discard(entries, actor=user)} dead letter(s).")
