"""A URLconf whose views module would import a job module, as a web project's does."""

from __future__ import annotations

from tests.unit import outside_jobs  # noqa: F401  what a views module importing its jobs does

urlpatterns: list[object] = []
