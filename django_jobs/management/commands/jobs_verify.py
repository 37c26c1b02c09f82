"""``manage.py jobs_verify [JOB ...]``: prove each job idempotent and crash-safe with the payloads it
declares (``@job(examples=[...])``), against a test database created for the run and destroyed
after it, as ``manage.py test`` does; exit 1 on any finding, so one CI line is enough."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.test import override_settings
from django.test.utils import (
    setup_databases,
    setup_test_environment,
    teardown_databases,
    teardown_test_environment,
)

from django_jobs.core import registry
from django_jobs.exceptions import JobNotFound
from django_jobs.management.arguments import whole
from django_jobs.testing.effects import count
from django_jobs.testing.examples import Verdict, verify_examples


class Command(BaseCommand):
    help = (
        "Run verify_idempotent and verify_crash_safe on every job's declared examples (or the JOBs "
        "named) against a test database; exit 1 on a finding. Jobs without examples are listed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("jobs", nargs="*", metavar="JOB", help="Job names (default: every job).")
        parser.add_argument(
            "--crash-points",
            type=whole(1),
            help='Crash points tried per example (default: JOBS["VERIFY_CRASH_POINTS"]); a large number '
            "tries every one.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        chosen = self._jobs(options["jobs"])
        given = dict(getattr(settings, "JOBS", None) or {})
        if options["crash_points"]:
            given["VERIFY_CRASH_POINTS"] = options["crash_points"]
        with override_settings(JOBS=given):
            verdicts = self._verify(chosen)
        self._report(verdicts, [job.name for job in chosen if not job.examples])

    def _jobs(self, names: list[str]) -> list[registry.Job[Any, Any]]:
        try:
            return [registry.get(name) for name in names] if names else registry.all_jobs()
        except JobNotFound as exc:
            raise CommandError(str(exc).split(";")[0], returncode=2) from None

    def _verify(self, chosen: list[registry.Job[Any, Any]]) -> list[Verdict]:
        setup_test_environment()
        databases = setup_databases(verbosity=0, interactive=False)
        try:
            return [verdict for job in chosen for verdict in verify_examples(job)]
        finally:
            teardown_databases(databases, verbosity=0)
            teardown_test_environment()

    def _report(self, verdicts: list[Verdict], without: list[str]) -> None:
        for verdict in verdicts:
            if verdict.findings:
                self.stdout.write(f"FAIL {verdict.call or verdict.job}")
                for finding in verdict.findings:
                    self.stdout.write("  " + finding.replace("\n", "\n  "))
            else:
                crash = "and crash-safe" if verdict.crash_checked else "(async def: crash safety not checked)"
                self.stdout.write(f"ok   {verdict.call}: idempotent {crash}")
        if without:
            self.stdout.write(f"Not verified (no examples): {', '.join(sorted(without))}")
        failed = sum(1 for verdict in verdicts if verdict.findings)
        if failed:
            raise CommandError(f"{failed} of {count(len(verdicts), 'example')} failed a check", returncode=1)
        self.stdout.write(f"{count(len(verdicts), 'example')} verified")
