"""Django's Tasks framework on django_jobs: ``django.tasks`` on Django 6.0, the ``django_tasks``
backport on Django 5.2, one code path for both.

```python
TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend", "QUEUES": ["default"], "OPTIONS": {}}}
```

Each ``@task`` is registered as a django_jobs job under its module path, so ``runjobs`` runs it as it
runs every job: by name from the registry, never by importing a path read from Redis.
"""

from __future__ import annotations

from django_jobs.tasks.backend import JobsBackend
from django_jobs.tasks.framework import InvalidTaskError, ResultDoesNotExist

__all__ = ["InvalidTaskError", "JobsBackend", "ResultDoesNotExist"]
