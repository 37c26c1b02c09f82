"""``task_finished`` from the worker: an outcome subscriber, so it is sent wherever an attempt's end is
decided (the work process, the supervisor for a killed or dead one, the reaper for a lost lease).

It is sent once a task has finished: succeeded, failed for good (dead-lettered), or was cancelled while
it ran (its result reads FAILED; its last error says how it stopped: ``JobCancelled``, or the kill).
An attempt that will be retried, or snoozes, sends no ``task_finished``; the next attempt sends
``task_started`` again. A task that never ran (cancelled while it waited, or dropped unrun past its
expiry) sends none: it never started.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

from django.utils import timezone

from django_jobs.core.outcomes import AttemptEnded, Outcome
from django_jobs.store import Status
from django_jobs.tasks.binding import bound, task_for
from django_jobs.tasks.results import attempt_state, task_result


def on_attempt_ended(event: AttemptEnded) -> None:
    binding = bound(event.name)
    if binding is None:
        return  # not a task
    if event.outcome is Outcome.SUCCESS:
        status, history = Status.FINISHED, None
    elif event.bury:
        status, history = Status.FAILED, event.history
    elif event.outcome is Outcome.CANCELLED:
        status, history = Status.CANCELED, event.history
    else:
        return  # retrying, or fenced off: another attempt owns the task
    now = timezone.now()
    started = now - dt.timedelta(seconds=event.duration or 0.0)
    value = json.loads(event.result) if event.result else None
    attempt = attempt_state(event.claimed, started, history)
    state = dataclasses.replace(attempt, status=status, finished_at=now, result=value)
    task = task_for(binding.task, binding.framework, state.queue)
    binding.framework.send("task_finished", task_result(binding.framework, task, state, binding.task.backend))
