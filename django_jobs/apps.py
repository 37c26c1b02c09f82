from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DjangoJobsConfig(AppConfig):
    name = "django_jobs"
    verbose_name = "Jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import chains, checks, collectors  # noqa: F401  checks and chains register on import

        collectors.register()  # the queue and dead-letter gauges join django-prometheus's /metrics

        autodiscover_modules("jobs")
