"""``python -m benchmarks.peerside <peer> <job> <n> <stamp file>``: enqueue ``n`` jobs for a peer
(``celery``, ``dramatiq`` or ``tasks``), each ``job(i, stamp file)``. For ``tasks`` the earlier runs'
rows are deleted first, and the ``n`` rows go in one transaction."""

from __future__ import annotations

import sys


def main(peer: str, job: str, n: int, path: str) -> None:
    if peer == "celery":
        from .celery_app import app

        task = app.tasks[f"bench.{job}"]
        for i in range(n):
            task.apply_async((i, path))
    elif peer == "dramatiq":
        from . import dramatiq_app

        actor = getattr(dramatiq_app, job)
        for i in range(n):
            actor.send(i, path)
    elif peer == "tasks":
        import django

        django.setup()
        from django.db import transaction
        from django_tasks_db.models import DBTaskResult

        from . import tasks

        DBTaskResult.objects.all().delete()
        with transaction.atomic():
            for i in range(n):
                getattr(tasks, job).enqueue(i, path)
    else:
        raise SystemExit(f"unknown peer {peer!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
