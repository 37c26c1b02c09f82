"""Tasks of Django's Tasks framework that the test suite enqueues through django_jobs' backend.

The same module serves both frameworks: ``django.tasks`` on Django 6.0, the backport on 5.2.
"""

import asyncio
import json
import os
import time

import django

from django_jobs import Snooze
from django_jobs.core.connections import get_connection

from .models import SideEffect

if django.VERSION >= (6, 0):
    from django.tasks import TaskContext, task
    from django.tasks.signals import task_finished
else:
    from django_tasks import TaskContext, task
    from django_tasks.signals import task_finished

#: Where every process, runjobs' included, notes each task_finished it sent, for the tests to read.
FINISHED = "tests:tasks_finished"


class Voided(Exception):
    """Listed in the backend's OPTIONS as permanent: never retried."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task()
def record(key: str) -> None:
    SideEffect.objects.create(key=key)


@task(queue_name="emails")
def mail(key: str) -> str:
    SideEffect.objects.create(key=f"mail:{key}")
    return key


@task(takes_context=True)
def flaky(context: TaskContext, key: str, failures: int) -> dict[str, object]:
    """Fails ``failures`` times, then returns what its context said on each attempt."""
    SideEffect.objects.create(key=f"{key}:{context.attempt}:{context.task_result.id}")
    if context.attempt <= failures:
        raise ConnectionError(f"flaky upstream, attempt {context.attempt}")
    return {"attempt": context.attempt, "errors": len(context.task_result.errors)}


@task(takes_context=True)
def own_id(context: TaskContext) -> str:
    return context.task_result.id


@task(takes_context=True)
def cancels_itself(context: TaskContext, key: str) -> None:
    """Asks for its own cancel while it runs (as another process would), then stops as asked."""
    from django_jobs import JobCancelled, cancel

    SideEffect.objects.create(key=f"{key}:{cancel(context.task_result.id)}")
    raise JobCancelled("stopped as asked")


@task()
def fails(message: str) -> None:
    raise ValueError(message)


@task()
def voided(key: str) -> None:
    SideEffect.objects.create(key=f"voided:{key}")
    raise Voided(key)


@task()
def not_json() -> object:
    return {1, 2}


@task()
def pair() -> tuple[int, str]:
    return (1, "two")


@task()
def overruns(seconds: float) -> None:
    time.sleep(seconds)


@task(takes_context=True)
async def async_add(context: TaskContext, a: int, b: int) -> dict[str, int]:
    await asyncio.sleep(0.01)
    await SideEffect.objects.acreate(key=f"async:{a}+{b}")
    return {"sum": a + b, "attempt": context.attempt}


@task()
def exits() -> None:
    """Ends its work process on every attempt: the supervisor settles it (WorkerLost)."""
    os._exit(3)


@task(takes_context=True)
def snoozes(context: TaskContext, key: str, times: int, returned: bool = False) -> object:
    """Snoozes (raised, or returned) its first ``times`` runs, then returns the attempt it ran as."""
    SideEffect.objects.create(key=f"{key}:{context.attempt}")
    if SideEffect.objects.filter(key__startswith=f"{key}:").count() <= times:
        if returned:
            return Snooze(0.05)
        raise Snooze(0.05)
    return {"attempt": context.attempt}


@task(backend="dummy")
def elsewhere() -> None:
    """A task of another backend: django_jobs must not register it."""


def _note_finished(sender, task_result, **kwargs) -> None:
    note = {"id": task_result.id, "status": str(task_result.status), "attempts": task_result.attempts,
            "errors": [e.exception_class_path for e in task_result.errors], "pid": os.getpid()}  # fmt: skip
    get_connection("default").rpush(FINISHED, json.dumps(note))


task_finished.connect(_note_finished, dispatch_uid="tests.note_finished")
