"""The test settings plus django-prometheus's ``/metrics``, for subprocesses that serve it."""

from tests.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "django_prometheus"]  # noqa: F405
ROOT_URLCONF = "tests.observability.urls"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
