"""``JobsBackend``: Django's Tasks framework on django_jobs' enqueue, worker and job records.

``enqueue()`` is a job's enqueue: transaction-aware and durable (the outbox; a task enqueued in a
transaction that rolls back never runs), on the task's queue, after ``run_after``, at its priority.
``runjobs`` runs it with a timeout, retries with full jitter and dead letters; ``get_result()``
reads the job's record, from any process, until ``JOBS["FINISHED_TTL"]`` after it ended.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.conf import settings
from django.core.checks import CheckMessage

from django_jobs.client.enqueue import enqueue_envelopes
from django_jobs.core.envelope import Options
from django_jobs.core.results import get_job
from django_jobs.exceptions import JobDoesNotExist
from django_jobs.tasks import checks, framework, options
from django_jobs.tasks.binding import Binding, bind, bound, task_for
from django_jobs.tasks.framework import InvalidTaskError, ResultDoesNotExist
from django_jobs.tasks.results import task_result

if TYPE_CHECKING:
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskResult
else:
    BaseTaskBackend = framework.available()[0].BaseTaskBackend

P = ParamSpec("P")
R = TypeVar("R")


class JobsBackend(BaseTaskBackend):
    """A ``TASKS`` backend whose tasks are django_jobs jobs: ``"BACKEND": "django_jobs.tasks.JobsBackend"``.

    ``QUEUES`` are ``RQ_QUEUES`` names (empty: all of them); ``OPTIONS`` give every task its timeout,
    retry policy and permanent exceptions, and the database enqueues wait for (see ``options``).
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        if not self.queues:  # "QUEUES": [] serves every queue django_jobs has
            self.queues = set(getattr(settings, "RQ_QUEUES", None) or {})
        self.task_options = options.parse(alias, self.options)

    def validate_task(self, task: Task[..., Any]) -> None:
        """The framework's own checks (as its task's framework has them), then registration: a task
        of this backend becomes the job its module path names, so the worker can run it."""
        family = framework.of(task)
        family.BaseTaskBackend.validate_task(self, task)
        if task.backend == self.alias:
            problems = self.task_options.problems_of(task.module_path)
            if problems:
                raise InvalidTaskError("; ".join(problems) + ".")
            bind(task, family, self.task_options.settings_for(task.module_path))

    def enqueue(self, task: Task[P, R], args: list[Any], kwargs: dict[str, Any]) -> TaskResult[P, R]:
        """Enqueue as a job; ``task_enqueued`` is sent once it is in Redis, or, inside a transaction,
        in the transaction's outbox (it reaches Redis at commit, and never if the transaction rolls back)."""
        self.validate_task(task)
        binding = self._binding(task)
        family = binding.framework
        args, kwargs = family.normalize_json(list(args)), family.normalize_json(dict(kwargs))
        envelope = enqueue_envelopes(binding.job, [(args, kwargs)], using=self.task_options.database,
                                     options=_options(task))[0]  # fmt: skip
        result = family.TaskResult(
            task=task, id=envelope.id, status=family.Status.READY, enqueued_at=envelope.created_at,
            started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
            backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip
        family.signals.task_enqueued.send(type(self), task_result=result)
        return cast("TaskResult[P, R]", result)

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's result as its job's record says now. Raises ``ResultDoesNotExist`` for an id
        that is unknown, was rolled back, or outlived ``JOBS["FINISHED_TTL"]``, and for a job that is
        not a task this process knows."""
        try:
            state = get_job(result_id)
        except (JobDoesNotExist, ValueError):
            raise ResultDoesNotExist(result_id) from None
        binding = bound(state.name)
        if binding is None:
            raise ResultDoesNotExist(f"{result_id} is the job {state.name}, not a task this process knows.")
        task = task_for(binding.task, binding.framework, state.queue)
        return cast("TaskResult[..., Any]", task_result(binding.framework, task, state, self.alias))

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return [*super().check(**kwargs), *checks.problems(self.alias, self.queues, self.task_options)]

    def _binding(self, task: Task[..., Any]) -> Binding:
        binding = bound(task.module_path)
        if binding is None or binding.task.func is not task.func:
            raise InvalidTaskError(
                f"Task {task.module_path} is not registered with django_jobs: its backend "
                f"{task.backend!r} is not a django_jobs backend."
            )
        return binding


def _options(task: Task[..., Any]) -> Options:
    """``run_after`` as a delay, ``queue_name`` as the queue, ``priority`` as the job's priority."""
    # 0, every task's default, leaves the job's own priority
    return Options(delay=_delay(task.run_after), queue=task.queue_name, priority=task.priority or None)


def _delay(run_after: dt.datetime | None) -> float:
    if run_after is None:
        return 0.0
    now = dt.datetime.now(dt.UTC) if run_after.tzinfo else dt.datetime.now()  # naive: USE_TZ = False
    return max((run_after - now).total_seconds(), 0.0)
