"""``manage.py jobs_pause [QUEUE ...] [--job NAME ...] [--reason TEXT]``: pause queues or job types
on every host; with nothing to pause, list what is paused (who, since when, why)."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from django_jobs.exceptions import JobsError
from django_jobs.flow.pausing import MAX_REASON, PAUSE_PERMISSION, describe, pause, paused, target
from django_jobs.management.arguments import audited_user, bounded_text, user_argument


def targets(options: dict[str, Any]) -> list[tuple[str, str]]:
    """("queue", name) and ("job", name) pairs, in the order given."""
    return [("queue", queue) for queue in options["queues"]] + [("job", name) for name in options["job"]]


def target_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("queues", nargs="*", metavar="QUEUE", help="queues (keys of RQ_QUEUES)")
    parser.add_argument(
        "--job", action="append", default=[], metavar="NAME", help="a job type, by name or alias; repeatable"
    )
    user_argument(parser)


class Command(BaseCommand):
    help = (
        "Pause queues (no worker takes their jobs) or job types (their jobs are set aside as they come "
        "up, without an attempt) on every runjobs within a second; running jobs finish. With no queue "
        "and no --job, list what is paused."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        target_arguments(parser)
        parser.add_argument(
            "--reason", type=bounded_text(MAX_REASON), default="", help="why, shown to other operators"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        wanted = targets(options)
        try:
            if not wanted:
                lines = [describe(one, time.time()) for one in paused()]
                self.stdout.write("\n".join(lines) if lines else "Nothing is paused.")
                return
            user = audited_user(options["user"], PAUSE_PERMISSION)
            checked = [target(**{kind: name}) for kind, name in wanted]  # all known, before any is paused
            for kind, name in checked:
                now = pause(**{kind: name}, reason=options["reason"], actor=user)
                self.stdout.write(f"{kind} {name}: {'paused' if now else 'already paused, unchanged'}")
        except (JobsError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        except RedisError as exc:
            raise CommandError(f"Redis did not answer ({exc})") from None
