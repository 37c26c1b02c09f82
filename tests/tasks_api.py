"""The public names of Django's Tasks framework under one spelling: ``django.tasks`` on Django 6.0, the
``django_tasks`` backport on 5.2. Tests of the Tasks backend import them from here (they are not
collected without either: see ``tests/conftest.py``)."""

import django

if django.VERSION >= (6, 0):
    from django.tasks import TaskResultStatus, default_task_backend, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    from django_tasks import TaskResultStatus, default_task_backend, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

__all__ = [
    "InvalidTask",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
