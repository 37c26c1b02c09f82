"""URLs: the admin (shop orders and django_jobs' dead letters) and django-rq's queue dashboard."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path

urlpatterns: list[URLPattern | URLResolver] = [
    path("admin/", admin.site.urls),
    path("django-rq/", include("django_rq.urls")),
]
