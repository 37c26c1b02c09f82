"""Django settings for building the documentation: enough for autodoc to import django_jobs and for the
reference extensions to build each management command's parser. Nothing connects to Redis or to a
database while the site is built."""

SECRET_KEY = "docs-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_rq",
    "django_jobs",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
RQ_QUEUES = {"default": {"URL": "redis://127.0.0.1:6379/0", "SERIALIZER": "rq.serializers.JSONSerializer"}}
JOBS: dict[str, object] = {}
