"""What the backend's ``check()`` reports: queues django_jobs cannot serve, and bad ``OPTIONS``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error

from django_jobs.core.connections import serializer_problem
from django_jobs.tasks.binding import bound
from django_jobs.tasks.options import BackendOptions

OPTIONS_HINT = "docs/reference/django-tasks.md (the documentation's 'Django Tasks') lists the OPTIONS."


def problems(alias: str, queues: set[str], options: BackendOptions) -> list[CheckMessage]:
    return [*_queue_problems(alias, queues), *_option_problems(alias, options)]


def _queue_problems(alias: str, queues: set[str]) -> list[CheckMessage]:
    configured: dict[str, Any] = getattr(settings, "RQ_QUEUES", None) or {}
    found: list[CheckMessage] = []
    for queue in sorted(queues):
        if queue not in configured:
            found.append(Error(
                f"TASKS[{alias!r}]['QUEUES'] names {queue!r}, which is not in RQ_QUEUES.",
                hint=f"Add {queue!r} to RQ_QUEUES, or remove it from TASKS[{alias!r}]['QUEUES'].",
                id="django_jobs.E018",
            ))  # fmt: skip
        elif (problem := serializer_problem(configured[queue])) is not None:
            found.append(Error(
                f"Queue {queue!r} of TASKS[{alias!r}] would not decode jobs with JSON: {problem}.",
                hint=f'Set RQ_QUEUES[{queue!r}]["SERIALIZER"] = "rq.serializers.JSONSerializer".',
                id="django_jobs.E019",
            ))  # fmt: skip
    return found


def _option_problems(alias: str, options: BackendOptions) -> list[CheckMessage]:
    found: list[CheckMessage] = [
        Error(f"{message}.", hint=OPTIONS_HINT, id="django_jobs.E020")
        for messages in options.problems.values()
        for message in messages
    ]
    for name in sorted(options.tasks):
        binding = bound(name)
        if binding is None or binding.task.backend != alias:
            owner = f"a task of TASKS[{binding.task.backend!r}]" if binding else "no task this process knows"
            found.append(Error(
                f"TASKS[{alias!r}]['OPTIONS']['TASKS'] names {name!r}, which is {owner}: "
                "its settings do not apply.",
                hint="Name a task of this backend by its module path (task.module_path), defined in an "
                "installed app's tasks module or in JOBS['IMPORT_MODULES'].",
                id="django_jobs.E021",
            ))  # fmt: skip
    return found
