"""Fixtures the integration tests share beyond the project-wide ones."""

from tests.cluster import cluster  # noqa: F401 - a fixture: a real Redis Cluster of our own
