"""The Django admin pages. Django's admin autodiscovery imports this package: importing each page
module here registers it (the dead letters with the job and pause pages they serve, chains, batches)."""

from django_jobs.admin import batches, chains, deadletters

__all__ = ["batches", "chains", "deadletters"]
