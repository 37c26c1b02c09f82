"""A job defined where runjobs does not look (not an app's jobs.py): the mistake check W004 reports."""

from __future__ import annotations

from django_jobs import job


@job(name="tests.outside", timeout=5)
def outside() -> None:
    """Does nothing; only where it is defined matters."""
