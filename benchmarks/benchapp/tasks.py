"""The benchmarks' Django Tasks task: the no-op as a @task, run by runjobs through the Tasks backend."""

from __future__ import annotations

import django

if django.VERSION >= (6, 0):
    from django.tasks import task
else:
    from django_tasks import task


@task()
def noop_task(n: int) -> None:
    """Does nothing: measures what the Tasks API (a result kept for every task) costs per job."""
