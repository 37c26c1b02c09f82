"""A small shop that runs its side effects (invoices, inventory sync, card charges) as django_jobs jobs."""
