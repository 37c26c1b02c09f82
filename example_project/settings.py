"""Settings for the example shop: SQLite by default, and the Redis database REDIS_URL names.

Everything a deployment would change comes from an environment variable, so ``scripts/demo`` can
point the project at a Redis it started itself without editing this file.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent

# The demo key is public on purpose; set DJANGO_SECRET_KEY anywhere that is not a laptop.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-insecure-demo-key")
# On by default so runserver serves the admin's static files; scripts/demo turns it off for the worker.
DEBUG = os.environ.get("DJANGO_DEBUG", "1").lower() not in ("0", "false", "no", "")
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_rq",
    "django_jobs",
    "example_project.shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DB_PATH", str(BASE_DIR / "db.sqlite3")),
        # The web process and every worker process write to this file: IMMEDIATE takes the write
        # lock at BEGIN, so concurrent transactions wait (up to "timeout") instead of failing
        # with "database is locked" halfway through. WAL with synchronous=NORMAL: a commit does not
        # wait for the disk (a power cut may lose the last ones, a crash of a process loses none), so
        # a job's ledger row outside a transaction costs about a Redis round trip, not an fsync.
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# No default: the shop's worker takes every job on "default" and "emails" of its database, so on a
# shared Redis (database 0 of localhost, say) it would take and dead-letter other applications' jobs.
# scripts/demo sets REDIS_URL to a database of the demo's own.
REDIS_URL = os.environ.get("REDIS_URL", "")
if not REDIS_URL:
    raise ImproperlyConfigured(
        "Set REDIS_URL to a Redis database that only the example shop uses, or run scripts/demo, "
        "which starts a private Redis."
    )
# JSONSerializer: django_jobs refuses queues that would decode jobs with pickle (check E003).
RQ_QUEUES = {
    "default": {"URL": REDIS_URL, "SERIALIZER": "rq.serializers.JSONSerializer"},
    "emails": {"URL": REDIS_URL, "SERIALIZER": "rq.serializers.JSONSerializer"},
}
JOBS = {
    # Dead letters are logged (and mailed to ADMINS, of which the demo has none).
    "ALERT_HOOKS": ["django_jobs.failures.alerts.log_and_mail_admins"],
    # A stopping worker waits this long for running jobs; the shop's jobs take milliseconds.
    "SHUTDOWN_GRACE": 5,
}

# Invoices are "sent" to the worker's console, so the demo needs no mail server.
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = "shop@example.com"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

# One line per job outcome (success, retry, dead) on the console: that is what the demo shows.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_jobs": {"handlers": ["console"], "level": os.environ.get("JOBS_LOG_LEVEL", "INFO")},
        "example_project": {"handlers": ["console"], "level": "INFO"},
    },
}
