"""The job browser's bulk actions: what each does to one job, and the permission it takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.http import HttpRequest
from redis.exceptions import RedisError

from django_jobs.admin.jobs import CANCEL_PERMISSION, RETRY_PERMISSION
from django_jobs.core import cancellation
from django_jobs.failures import retrying


@dataclass(frozen=True)
class BulkAction:
    """An action the browser applies to many jobs: its label, the permission it takes, and what it
    does to one job (the outcome's name, for the summary and the audit log)."""

    label: str
    permission: str
    act: Callable[[str, HttpRequest], str]

    def run(self, job_id: str, request: HttpRequest) -> str:
        try:
            return self.act(job_id, request)
        except RedisError as exc:
            return f"not done: Redis did not answer ({exc})"


BULK_ACTIONS = {
    "cancel": BulkAction(
        "Cancel", CANCEL_PERMISSION, lambda job_id, request: cancellation.cancel(job_id).value
    ),
    "retry": BulkAction(
        "Retry now",
        RETRY_PERMISSION,
        lambda job_id, request: retrying.retry_now(job_id, actor=request.user).outcome.value,
    ),
}
BULK_URL_NAME = "django_jobs_job_bulk"
#: Jobs one bulk action acts on at most.
BULK_LIMIT = 10_000
