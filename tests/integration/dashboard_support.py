"""Dead letters and operators for the dashboard tests, made through the same code the worker uses."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import Permission, User

from django_jobs.core import payload
from django_jobs.core.connections import get_connection
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.testing import run_jobs

ALL_PERMISSIONS = (
    "view_deadletter",
    "view_deadletter_payload",
    "requeue_deadletter",
    "discard_deadletter",
    "delete_deadletter",
    "view_queue_overview",
    "cancel_job",
    "retry_job",
    "pause_queue",
)


def traceback_text(function: str, line: int = 12, exception: str = "ValueError", message: str = "bad") -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/releases/7/django_jobs/execution.py", line 250, in run\n'
        "    definition.func(*args, **kwargs)\n"
        f'  File "/srv/app/releases/7/shop/jobs.py", line {line}, in {function}\n'
        "    raise Failure()\n"
        f"{exception}: {message}\n"
    )


def record(
    job_name: str = "tests.record",
    args: Sequence[Any] = ("again",),
    kwargs: dict[str, Any] | None = None,
    *,
    exception: str = "builtins.ConnectionError",
    message: str = "down",
    function: str = "charge",
    queue: str = "default",
    attempts: int = 3,
    reason: str = DeadLetter.Reason.EXHAUSTED,
    job_id: str | None = None,
) -> DeadLetter:
    """A dead letter written by ``deadletter.record``, as the worker writes one."""
    now = dt.datetime.now(dt.UTC)
    history = [
        {"attempt": n, "at": (now - dt.timedelta(minutes=attempts - n)).isoformat(), "exception": exception,
         "message": message}
        for n in range(1, attempts + 1)
    ]  # fmt: skip
    fields = {
        "data": payload.dumps(job_name, list(args), kwargs or {}, 1 << 20),
        "dj_attempt": str(attempts).encode(),
    }
    failure = deadletter.Failure(
        job_id or uuid.uuid4().hex,
        queue,
        reason,
        exception,
        message,
        traceback_text(function, exception=exception.rpartition(".")[2], message=message),
        history,
    )
    return deadletter.record(failure, fields)


def operator(client: Any, *codenames: str, username: str = "op") -> User:
    """A logged-in staff user with exactly these permissions of the dashboard."""
    user = User.objects.create_user(username, is_staff=True)  # no password: hashing one is slow
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def drain(timeout: float = 10.0) -> None:
    """Run jobs in this process, retries included, until nothing is queued or scheduled."""
    redis = get_connection("default")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run_jobs()
        if not redis.llen("rq:queue:default") and not redis.zcard("rq:scheduled:default"):
            return
        time.sleep(0.02)
    raise AssertionError("jobs did not drain")
