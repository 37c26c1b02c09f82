"""App config. django_jobs imports ``shop.jobs`` itself at startup (it autodiscovers ``jobs`` modules)."""

from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "example_project.shop"
    label = "shop"
    verbose_name = "Shop"
    default_auto_field = "django.db.models.BigAutoField"
