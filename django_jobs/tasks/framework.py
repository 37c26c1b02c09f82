"""Django's Tasks framework as this process has it: ``django.tasks`` (Django 6.0+), the ``django_tasks``
backport (Django 5.2), or both. One code path serves either: each task is handled by the framework its
``Task`` class comes from, and the backend's base class is the first one found.

Both are imported by name here, never statically, so the package type-checks against ``django.tasks``'
stubs whichever of them is installed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_jobs.core.outcomes import isolated


@dataclass(frozen=True)
class Framework:
    """The names one framework gives its classes, exceptions, signals and JSON normalizer."""

    name: str
    Task: type[Any]
    TaskResult: Any
    TaskContext: Any
    TaskError: Any
    Status: Any  # TaskResultStatus
    BaseTaskBackend: type[Any]
    InvalidTask: type[Exception]
    TaskResultDoesNotExist: type[Exception]
    signals: Any  # the module of task_enqueued, task_started, task_finished
    normalize_json: Callable[[Any], Any]

    def send(self, signal: str, task_result: Any) -> None:
        """Send ``task_started`` or ``task_finished`` from the worker, as the frameworks do (the sender
        is the backend's class). A receiver that raises is logged; the task's outcome stands."""
        sent = getattr(self.signals, signal)
        isolated(
            f"A receiver of {signal} for task {task_result.task.module_path} {task_result.id}",
            lambda: sent.send_robust(type(task_result.task.get_backend()), task_result=task_result),
        )


def _load(package: str, invalid: str, json_module: str) -> Framework:
    """One framework's names: ``django.tasks`` and the backport differ only in these three."""
    base = import_module(f"{package}.base")
    exceptions = import_module(f"{package}.exceptions")
    return Framework(
        package, base.Task, base.TaskResult, base.TaskContext, base.TaskError, base.TaskResultStatus,
        import_module(f"{package}.backends.base").BaseTaskBackend, getattr(exceptions, invalid),
        exceptions.TaskResultDoesNotExist, import_module(f"{package}.signals"),
        import_module(json_module).normalize_json,
    )  # fmt: skip


def _django() -> Framework:
    return _load("django.tasks", "InvalidTask", "django.utils.json")


def _backport() -> Framework:
    return _load("django_tasks", "InvalidTaskError", "django_tasks.utils")


@functools.cache
def available() -> tuple[Framework, ...]:
    """The frameworks this process can import, ``django.tasks`` first."""
    found = []
    for load in (_django, _backport):
        try:
            found.append(load())
        except ImportError:
            continue
    if not found:
        raise ImproperlyConfigured(
            "django_jobs.tasks.JobsBackend needs Django's Tasks framework: Django 6.0 or later, or on "
            "Django 5.2 the django-tasks backport (pip install 'django-durable-jobs[tasks]')."
        )
    return tuple(found)


def of(task: object) -> Framework:
    """The framework ``task`` belongs to."""
    for framework in available():
        if isinstance(task, framework.Task):
            return framework
    raise TypeError(f"{task!r} is not a Task of {' or '.join(f.name for f in available())}.")


def _merged(name: str, attribute: str, doc: str) -> type[Exception]:
    """One exception class that is each available framework's own, so either's ``except`` catches it."""
    bases = tuple(dict.fromkeys(getattr(framework, attribute) for framework in available()))
    return type(name, bases, {"__doc__": doc, "__module__": "django_jobs.tasks"})


InvalidTaskError = _merged(
    "InvalidTaskError", "InvalidTask", "The task cannot run on django_jobs: its settings are invalid."
)
ResultDoesNotExist = _merged(
    "ResultDoesNotExist",
    "TaskResultDoesNotExist",
    "No task has this id here: never enqueued, rolled back, expired, or not a task this process knows.",
)
