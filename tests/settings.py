"""Settings for django_jobs' own test suite: real Redis, and SQLite or PostgreSQL (JOBS_TEST_DB)."""

import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import django

BASE = Path(__file__).resolve().parent
SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_rq",
    "django_jobs",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
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

# Subprocesses (runjobs) are pointed at the test database the parent created.
_db_kind = os.environ.get("JOBS_TEST_DB", "sqlite")
_test_name = os.environ.get("JOBS_TEST_DB_NAME")
# JOBS_TEST_NAME names this run's test databases, so that runs at once (the test matrix's, or two
# checkouts') share none.
_run = "_" + os.environ["JOBS_TEST_NAME"] if os.environ.get("JOBS_TEST_NAME") else ""
_default: dict[str, Any]
if _db_kind == "postgres":
    _default = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _test_name or "django_jobs",
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "TEST": {"NAME": f"test_django_jobs{_run}"},
    }
    _other = {
        **_default,
        "TEST": {"NAME": f"test_django_jobs{_run}_other"},
        "NAME": (_test_name or "django_jobs") + "_other",
    }
else:
    _file = str(BASE.parent / "var" / f"test-db{_run}.sqlite3")
    _default = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": _test_name or _file,
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        "TEST": {"NAME": _file},
    }
    _other = {**_default, "NAME": _default["NAME"] + "-other", "TEST": {"NAME": _file + "-other"}}
# A runjobs subprocess gets only the default database: the "other" one exists only for tests that ask.
DATABASES = {"default": _default} if _test_name else {"default": _default, "other": _other}

REDIS_URL = os.environ.get("JOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
_REDIS: dict[str, Any] = {"URL": REDIS_URL}
if os.environ.get("JOBS_TEST_SENTINELS"):  # [[host, port], ...]: the failover tests' sentinels
    _REDIS = {"SENTINELS": [tuple(s) for s in json.loads(os.environ["JOBS_TEST_SENTINELS"])],
              "MASTER_NAME": os.environ.get("JOBS_TEST_MASTER_NAME", "jobs"), "DB": 0}  # fmt: skip
RQ_QUEUES = {
    "default": {**_REDIS, "SERIALIZER": "rq.serializers.JSONSerializer"},
    "emails": {**_REDIS, "SERIALIZER": "rq.serializers.JSONSerializer"},
}
# {queue: url}: queues that live on another Redis server (the sharding tests' runjobs).
for _queue, _url in json.loads(os.environ.get("JOBS_TEST_QUEUE_URLS", "{}")).items():
    RQ_QUEUES[_queue] = {"URL": _url, "SERIALIZER": "rq.serializers.JSONSerializer"}
JOBS = {
    "ALERT_HOOKS": ["django_jobs.failures.alerts.log_and_mail_admins", "tests.testapp.alerts.remember"],
    "LEASE_SECONDS": float(os.environ.get("JOBS_TEST_LEASE", "3")),
    "TIMEOUT_GRACE": 1,
    "CANCEL_GRACE": float(os.environ.get("JOBS_TEST_CANCEL_GRACE", "1")),
    "SHUTDOWN_GRACE": float(os.environ.get("JOBS_TEST_SHUTDOWN_GRACE", "10")),
    "MAINTENANCE_INTERVAL": 0.1,
    # Periodic jobs are off unless a test switches them on (through its runjobs' environment).
    "CRON": json.loads(os.environ.get("JOBS_TEST_CRON", '{"tests.hourly": null}')),
    "ALLOW_EVICTION": os.environ.get("JOBS_TEST_ALLOW_EVICTION") == "1",
    "LEDGER_SWEEP_INTERVAL": float(os.environ.get("JOBS_TEST_LEDGER_SWEEP", "10")),
    "BATCH_SWEEP_INTERVAL": float(os.environ.get("JOBS_TEST_BATCH_SWEEP", "10")),
    "FINISHED_TTL": int(os.environ.get("JOBS_TEST_FINISHED_TTL", "3600")),
    "REPLICA_TIMEOUT": float(os.environ.get("JOBS_TEST_REPLICA_TIMEOUT", "0.5")),
}
if os.environ.get("JOBS_TEST_DURABILITY"):  # unset: the tests run at the package's default level
    JOBS["DEFAULT_DURABILITY"] = os.environ["JOBS_TEST_DURABILITY"]
# Django's Tasks framework: django.tasks on Django 6.0; on 5.2 the django_tasks backport, when installed.
_TASKS_FRAMEWORK = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
if _TASKS_FRAMEWORK == "django_tasks" and find_spec("django_tasks"):
    INSTALLED_APPS.append("django_tasks")
if django.VERSION >= (6, 0) or "django_tasks" in INSTALLED_APPS:
    TASKS = {
        "default": {
            "BACKEND": "django_jobs.tasks.JobsBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {
                "TIMEOUT": 10,
                "RETRY": {"max_attempts": 3, "base": 0.05, "factor": 2, "max_delay": 0.2},
                "TASKS": {
                    "tests.testapp.tasks.overruns": {"timeout": 0.5, "retry": {"max_attempts": 1}},
                    "tests.testapp.tasks.voided": {"permanent": ["tests.testapp.tasks.Voided"]},
                },
            },
        },
        "dummy": {"BACKEND": f"{_TASKS_FRAMEWORK}.backends.dummy.DummyBackend"},
    }
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Django 6.0 takes plain addresses and deprecates (name, address) pairs; 5.2 takes only pairs.
ADMINS = ["ops@example.com"] if django.VERSION >= (6, 0) else [("Ops", "ops@example.com")]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "django_jobs": {"handlers": ["console"], "level": os.environ.get("JOBS_TEST_LOG", "WARNING")}
    },
}
if os.environ.get("JOBS_TEST_LOGGING") == "unset":  # a fresh project's: no LOGGING setting at all
    del LOGGING

if os.environ.get("JOBS_TEST_OTEL_SPANS"):  # a runjobs subprocess whose spans a tracing test reads
    from tests.otel_file import install

    install(os.environ["JOBS_TEST_OTEL_SPANS"])
