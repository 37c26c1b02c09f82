"""Django Tasks (django-tasks-db): ``noop`` and ``wait``."""

from __future__ import annotations

from django_tasks import task

from benchmarks import stamp


@task()
def noop(n: int, path: str) -> None:
    stamp.noop(n, path)


@task()
def wait(n: int, path: str) -> None:
    stamp.wait(n, path)
