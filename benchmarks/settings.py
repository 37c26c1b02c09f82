"""Settings of the benchmark project, configured from the environment by ``benchmarks.run``.

* ``BENCH_REDIS_URL``   the private Redis the harness started (never a shared one);
* ``BENCH_DB``, ``BENCH_SQLITE_PATH``, ``BENCH_PG_NAME``  the database (``benchmarks/dbconfig.py``);
* ``BENCH_DURABILITY``, ``BENCH_SECOND_REDIS_URL``, ``BENCH_HISTORY``  the setup being measured
  (``benchmarks/setups.py``);
* ``BENCH_FAIRNESS``    set: ``runjobs`` also imports the fairness benchmark's jobs.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from typing import Any

import django

from .dbconfig import database

SECRET_KEY = "benchmarks-only"
ROOT_URLCONF = "benchmarks.urls"  # the admin, for the job browser's page times
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django_jobs records operator actions in the admin's LogEntry, so the admin must be installed.
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_rq",
    "django_jobs",
    "benchmarks.benchapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": database()}

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6385/0")
RQ_QUEUES = {"default": {"URL": REDIS_URL, "SERIALIZER": "rq.serializers.JSONSerializer"}}
if os.environ.get("BENCH_SECOND_REDIS_URL"):  # the "two-servers" setup: a queue on a second Redis
    RQ_QUEUES["second"] = {
        "URL": os.environ["BENCH_SECOND_REDIS_URL"],
        "SERIALIZER": "rq.serializers.JSONSerializer",
    }

# django_jobs' defaults, except that dead letters are only logged (and ``--lease-seconds``).
JOBS: dict[str, Any] = {"ALERT_HOOKS": [], "HISTORY": os.environ.get("BENCH_HISTORY", "1") != "0"}
if os.environ.get("BENCH_DURABILITY"):
    JOBS["DEFAULT_DURABILITY"] = os.environ["BENCH_DURABILITY"]
if os.environ.get("BENCH_LEASE_SECONDS"):
    JOBS["LEASE_SECONDS"] = float(os.environ["BENCH_LEASE_SECONDS"])
if os.environ.get("BENCH_FAIRNESS"):  # the fairness benchmark's tenant jobs, for its runjobs only
    JOBS["IMPORT_MODULES"] = ["benchmarks.benchapp.tenants"]

# Django's Tasks framework (django.tasks on 6.0, the backport on 5.2), for the @task run.
if django.VERSION < (6, 0) and find_spec("django_tasks"):
    INSTALLED_APPS.append("django_tasks")
if django.VERSION >= (6, 0) or "django_tasks" in INSTALLED_APPS:
    TASKS = {"default": {"BACKEND": "django_jobs.tasks.JobsBackend", "QUEUES": ["default"]}}

# Every worker logs at WARNING, so no worker pays for one log line per job (rqworker runs with -v 0).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
