"""Django settings of the Django Tasks peer: django-tasks-db's ``DatabaseBackend`` on the benchmark's
own database (``benchmarks/dbconfig.py``), run by its ``db_worker``."""

from __future__ import annotations

from benchmarks.dbconfig import database

SECRET_KEY = "benchmarks-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django_tasks", "django_tasks_db"]
DATABASES = {"default": database()}
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
