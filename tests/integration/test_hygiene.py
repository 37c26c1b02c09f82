"""Connection hygiene between jobs in a long-lived worker."""

from __future__ import annotations

import pytest
from django.db import connection, reset_queries
from django.test import override_settings

from django_jobs.core.execution import db_hygiene
from django_jobs.testing import run_jobs
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_healthy_connection_is_kept_between_jobs_even_with_conn_max_age_zero():
    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    jobs.BACKENDS.clear()
    jobs.which_connection.enqueue_many([(), (), ()])
    run_jobs()
    assert len(jobs.BACKENDS) == 3
    assert len(set(jobs.BACKENDS)) == 1  # no reconnect per job


def test_a_leaked_transaction_is_closed_between_jobs():
    connection.set_autocommit(False)
    db_hygiene()
    assert connection.connection is None  # closed, so the next job starts clean
    connection.set_autocommit(True)


@override_settings(DEBUG=True)
def test_the_debug_query_log_does_not_grow_in_a_worker():
    reset_queries()
    jobs.record.enqueue_many([(f"k{i}",) for i in range(20)])
    run_jobs()
    assert len(connection.queries) < 5
