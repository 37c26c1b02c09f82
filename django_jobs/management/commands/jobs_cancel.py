"""``manage.py jobs_cancel ID [ID ...]``: cancel jobs by id, one line per id saying what happened."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core import audit
from django_jobs.core.cancellation import PERMISSION, cancel
from django_jobs.management.arguments import audited_user, job_id, user_argument
from django_jobs.store import CancelResult


def _line(result: CancelResult) -> str:
    if result is CancelResult.REQUESTED:
        return (
            "cancel requested: it is running, and stops when its code checks or is killed "
            f"{jobs_settings.CANCEL_GRACE:g} s after its worker learns of it"
        )
    return {
        CancelResult.CANCELLED: "cancelled: it was waiting and will not run",
        CancelResult.ALREADY_ENDED: "already ended (finished, failed or cancelled): nothing changed",
        CancelResult.NOT_FOUND: "not found: no such job in Redis (unknown, not pushed yet, or expired)",
    }[result]


class Command(BaseCommand):
    help = (
        "Cancel jobs: a waiting one at once, a running one by asking it to stop (killed after "
        "JOBS['CANCEL_GRACE'] seconds), each written to the admin log. Exits 1 if any id was not found."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="job ids")
        user_argument(parser)

    def handle(self, *args: Any, ids: list[str], **options: Any) -> None:
        user = audited_user(options["user"], PERMISSION)
        missing = 0
        for one in ids:
            try:
                result = cancel(one)
            except RedisError as exc:
                raise CommandError(
                    f"{one}: Redis did not answer ({exc}); nothing more was cancelled"
                ) from None
            audit.record(user, [audit.Entry(one, f"Job {one}", f"Cancel: {result.value} (jobs_cancel)")])
            self.stdout.write(f"{one}: {_line(result)}")
            missing += result is CancelResult.NOT_FOUND
        if missing:
            raise CommandError(f"{missing} of {len(ids)} job(s) not found", returncode=1)
