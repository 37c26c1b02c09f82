"""Benchmarks of django_jobs' worker and enqueue against django-rq / RQ; run ``benchmarks/run``."""
