"""The Django admin pages. Django's admin autodiscovery imports this package: importing each page
module here registers it (the job browser, the dead letters with the job and pause pages they
serve, chains, batches)."""

from django_jobs.admin import batches, browser, chains, deadletters

__all__ = ["batches", "browser", "chains", "deadletters"]
