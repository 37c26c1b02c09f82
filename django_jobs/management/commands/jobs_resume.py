"""``manage.py jobs_resume [QUEUE ...] [--job NAME ...] [--all]``: lift pauses on every host; a job
type's parked jobs go back to the head of their queues, in their order."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from django_jobs.exceptions import JobsError
from django_jobs.flow.pausing import PAUSE_PERMISSION, paused, resume
from django_jobs.management.arguments import audited_user
from django_jobs.management.commands.jobs_pause import target_arguments, targets


class Command(BaseCommand):
    help = (
        "Resume paused queues or job types on every runjobs within a second; a job type's parked jobs "
        "go back to the head of their queues, in order. --all resumes everything paused."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        target_arguments(parser)
        parser.add_argument("--all", action="store_true", help="resume every paused queue and job type")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            wanted = targets(options)
            if options["all"] == bool(wanted):
                raise CommandError("Name queues or --job types to resume, or pass --all (not both).")
            user = audited_user(options["user"], PAUSE_PERMISSION)
            for kind, name in wanted or [(one.kind, one.name) for one in paused()]:
                done = resume(**{kind: name}, actor=user)
                back = f"; {done.released} held job(s) back on their queue" if kind == "job" else ""
                self.stdout.write(
                    f"{kind} {name}: {'resumed' if done.was_paused else 'was not paused'}{back}"
                )
        except (JobsError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        except RedisError as exc:
            raise CommandError(f"Redis did not answer ({exc})") from None
