"""``manage.py jobs_deploy``: print or write the Prometheus rules and the Grafana dashboard this
version ships, so an installed package needs no clone of the repository to be monitored; and
``jobs_deploy check``, the pre-deploy check that this code can run the jobs already waiting."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_jobs.management.arguments import output_file, whole
from django_jobs.ops import backlog

#: What the command hands out, and where it lives inside the package.
FILES = {
    "alerts": "prometheus/alerts.yml",
    "alert-tests": "prometheus/tests/alerts_test.yml",
    "grafana": "grafana/dashboard.json",
}


def shipped(name: str) -> str:
    """The text of one shipped file (a key of ``FILES``)."""
    return (resources.files("django_jobs") / "deploy" / FILES[name]).read_text(encoding="utf-8")


class Command(BaseCommand):
    help = (
        "Print (or write with --output) the Prometheus alert rules, their promtool unit tests or the "
        "Grafana dashboard shipped with django_jobs. 'check': before a deploy, bind every waiting, "
        "running and dead-lettered job to this code's jobs; exit 1 if any would fail. It writes nothing."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("what", choices=[*sorted(FILES), "check"], help="Which file, or check.")
        parser.add_argument(
            "--batch", type=whole(1, 100_000), default=backlog.BATCH, help="check: ids per read."
        )
        parser.add_argument(
            "--output", "-o", type=output_file, help="Write it to this file instead of stdout."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["what"] == "check":
            self._check(options["batch"])
            return
        text = shipped(options["what"])
        output: Path | None = options["output"]
        if output is None:
            self.stdout.write(text, ending="")
            return
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot write {output}: {exc.strerror or exc}", returncode=2) from exc
        self.stderr.write(f"Wrote {output}")

    def _check(self, batch: int) -> None:
        started = time.monotonic()
        try:
            checked = backlog.check(batch=batch)
        except RedisError as exc:
            raise CommandError(f"Redis did not answer: {exc}", returncode=2) from None
        took = time.monotonic() - started
        for (name, why), count in sorted(checked.problems.items()):
            sample = checked.samples[(name, why)]
            self.stdout.write(f"FAIL {name}: {count} job(s) will not run: {why} (e.g. {sample})")
        failing = sum(checked.problems.values())
        summary = f"{checked.jobs} job(s) checked in {took:.1f} s"
        if failing:
            raise CommandError(f"{failing} of {summary} would fail with this code", returncode=1)
        self.stdout.write(f"ok   {summary}: every one binds to this code")
