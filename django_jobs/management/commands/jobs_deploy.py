"""``manage.py jobs_deploy``: print or write the Prometheus rules and the Grafana dashboard this
version ships, so an installed package needs no clone of the repository to be monitored."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.management.arguments import output_file

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
        "Grafana dashboard shipped with django_jobs."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("what", choices=sorted(FILES), help="Which file.")
        parser.add_argument(
            "--output", "-o", type=output_file, help="Write it to this file instead of stdout."
        )

    def handle(self, *args: Any, **options: Any) -> None:
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
