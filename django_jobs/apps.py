from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules

if TYPE_CHECKING:
    from django_jobs.core.outcomes import Subscriber


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    #: Names of the jobs registered once start-up imported the job modules: the jobs runjobs knows.
    #: A job registered later (by a view's import, say) is one the worker would dead-letter.
    discovered: frozenset[str] = frozenset()

    def ready(self) -> None:
        # The composition root: each service is connected here, from above, so that the layers below
        # (the registry, the outcome pipeline) never import one. checks and chains register on import.
        from django_jobs import checks  # noqa: F401
        from django_jobs.client import enqueue
        from django_jobs.conf import jobs_settings, task_backend_aliases
        from django_jobs.core import outcomes, registry, results, tracing
        from django_jobs.failures import deadletter
        from django_jobs.ops import collectors, why
        from django_jobs.workflows import batches, chains, cron  # noqa: F401

        registry.deliver_through(enqueue.enqueue_calls)
        results.explain_through(why.explain)
        tasks = bool(task_backend_aliases())
        outcomes.connect(
            [
                ("Dead-lettering", deadletter.on_attempt_ended),
                ("Marking a periodic run finished", cron.on_attempt_ended),
                ("Settling a batch member", batches.on_attempt_ended),
                *(self._task_subscribers() if tasks else ()),
                *tracing.SUBSCRIBERS,
                *outcomes.REPORTING,
            ]
        )
        collectors.register()  # the queue and dead-letter gauges join django-prometheus's /metrics

        autodiscover_modules("jobs", *(["tasks"] if tasks else []))
        for module in jobs_settings.IMPORT_MODULES:
            import_module(module)
        self.discovered = frozenset(job.name for job in registry.all_jobs())

    @staticmethod
    def _task_subscribers() -> list[tuple[str, Subscriber]]:
        """The worker's Django Tasks signals. Imported only when ``settings.TASKS`` names django_jobs'
        backend: ``django.tasks`` (or the ``django_tasks`` backport) may not be installed otherwise."""
        from django_jobs.tasks.events import on_attempt_ended

        return [("Sending the task signals", on_attempt_ended)]
