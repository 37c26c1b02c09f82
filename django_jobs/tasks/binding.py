"""Each task as a django_jobs job: registered under its ``module_path`` when the backend first validates
it (when ``@task`` creates it, in both frameworks), and run by a runner that hands it its
``TaskContext`` and sends ``task_started``.

The worker finds a task by that name in the registry, like any job: the path is a name, never
imported. A Task of the same function made later (``using()``, another alias of this backend) runs as
the job its first validation registered, with that backend's settings.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.utils import timezone

from django_jobs.core import execution, registry
from django_jobs.core.results import JobState
from django_jobs.exceptions import JobNotFound, ResultError, Snooze
from django_jobs.store import Status
from django_jobs.tasks.framework import Framework, InvalidTaskError
from django_jobs.tasks.options import TaskSettings
from django_jobs.tasks.results import attempt_state, task_result


@dataclass(frozen=True)
class Binding:
    """A task (as first validated: its own backend) and the job that runs it."""

    task: Any
    framework: Framework
    job: registry.Job[Any, Any]


_bindings: dict[str, Binding] = {}
_lock = threading.Lock()


def bound(name: str) -> Binding | None:
    """The task registered under ``name``, if the registry still runs that name as this task."""
    binding = _bindings.get(name)
    if binding is None:
        return None
    try:
        current = registry.get(name)
    except JobNotFound:
        return None
    return binding if current is binding.job else None


def bind(task: Any, framework: Framework, settings: TaskSettings) -> Binding:
    """Register ``task`` under its module path, once; later Tasks of the same function share the job."""
    name = task.module_path
    with _lock:
        current = bound(name)
        if current is not None:
            if current.task.func is not task.func or current.framework is not framework:
                raise InvalidTaskError(f"{name} is already registered as a task of {current.framework.name}.")
            return current
        try:
            job = registry.job(
                name=name,
                queue=task.queue_name,
                timeout=settings.timeout,
                retry=settings.retry,
                permanent=settings.permanent,
                store_result=True,
            )(_runner(task, framework))
        except ValueError as exc:  # the name is a plain @job's
            raise InvalidTaskError(f"Task {name} cannot be registered with django_jobs: {exc}") from None
        binding = _bindings[name] = Binding(task, framework, job)
        return binding


def task_for(task: Any, framework: Framework, queue: str) -> Any:
    """``task`` as enqueued on ``queue``: itself, or its copy on that queue if it is another."""
    if queue == task.queue_name:
        return task
    try:
        return task.using(queue_name=queue)
    except framework.InvalidTask:  # a queue its backend no longer lists
        return task


def _runner(task: Any, framework: Framework) -> Callable[..., Any]:
    """The job's function: ``task.func`` with its context, its start signalled, its value as JSON.

    For an ``async def`` task it returns the coroutine (and is marked as a coroutine function), so
    the context is built and ``task_started`` sent before the event loop starts, as a sync receiver
    (one that uses the ORM) needs."""
    func = task.func

    def run(*args: Any, **kwargs: Any) -> Any:
        result = _running(task, framework, list(args), kwargs)
        framework.send("task_started", result)
        if task.takes_context:
            args = (framework.TaskContext(task_result=result), *args)
        value = func(*args, **kwargs)
        return _normalized_async(task, framework, value) if is_async else _normalized(task, framework, value)

    is_async = iscoroutinefunction(func)
    # The task's names (the registry tells tasks apart by them, check W004 by the module) and its
    # signature without the context, which the runner passes itself.
    run.__module__, run.__name__, run.__qualname__, run.__doc__ = (
        func.__module__, func.__name__, func.__qualname__, func.__doc__,
    )  # fmt: skip
    signature = inspect.signature(func)
    parameters = list(signature.parameters.values())[1 if task.takes_context else 0 :]
    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return markcoroutinefunction(run) if is_async else run


def _running(task: Any, framework: Framework, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The running attempt's TaskResult: from its claim in a worker; outside one (``JOBS["MODE"]`` =
    "immediate", or the job called as a function) there is no record: only the call, attempt 1."""
    now = timezone.now()
    claimed = execution.current_claim()
    if claimed is not None and claimed.record.name == task.module_path:
        state = attempt_state(claimed, now)
    else:
        state = JobState(
            id="", name=task.module_path, queue=task.queue_name, status=Status.STARTED, attempts=1,
            args=args, kwargs=kwargs, result=None, errors=(), enqueued_at=now, started_at=now,
            last_attempted_at=now, finished_at=None, worker_ids=("immediate",),
        )  # fmt: skip
    return task_result(framework, task_for(task, framework, state.queue), state, task.backend)


def _normalized(task: Any, framework: Framework, value: Any) -> Any:
    """The return value as the framework keeps it (tuples as lists); one it cannot keep fails the
    attempt with ``ResultError``, a permanent failure: running it again would return it again. A
    returned ``Snooze`` is no value: it passes through, and the worker snoozes the task."""
    if isinstance(value, Snooze):
        return value
    try:
        return framework.normalize_json(value)
    except (TypeError, ValueError) as exc:
        raise ResultError(
            f"Task {task.module_path} returned a {type(value).__name__}, which cannot be stored as JSON "
            f"({exc}). Return IDs and plain values."
        ) from exc


async def _normalized_async(task: Any, framework: Framework, value: Any) -> Any:
    return _normalized(task, framework, await value)
