"""A database that stops answering, seen from a job, from the supervisor's maintenance and from a
request: each fails what it was doing, loses nothing, and works again once the database is back.

The default connection reaches PostgreSQL through a TCP proxy the tests cut (``tests.chaos``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from django_jobs import RetryPolicy, job
from django_jobs.core.connections import get_connection
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import Store
from django_jobs.testing import run_jobs
from django_jobs.worker.maintenance import Maintenance
from tests.chaos import CuttableProxy
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=["default", "other"]),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"),
        reason="a database cut needs a database server to cut off",
    ),
]


@pytest.fixture
def db_link() -> Iterator[CuttableProxy]:
    """The default connection, reopened through a proxy this test may cut."""
    port = connection.settings_dict["PORT"]
    proxy = CuttableProxy(int(port))
    proxy.start()
    connection.close()
    connection.settings_dict["PORT"] = str(proxy.port)
    yield proxy
    connection.close()
    connection.settings_dict["PORT"] = port
    proxy.cut()


def test_a_job_stopped_by_its_timeout_mid_query_leaves_no_broken_connection_behind(restore_registry):
    """A query to a database that stopped answering (a partition) waits until the job's timeout
    interrupts it mid-command, which leaves its connection unable to take another query: it is
    closed, so the job's dead letter and the next job run on a fresh one."""

    @job(name="tests.stuck_query", timeout=0.5, retry=RetryPolicy(max_attempts=1))
    def stuck_query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(3)")

    stuck = stuck_query.enqueue()
    jobs.record.enqueue("next")
    assert run_jobs() == 2
    assert DeadLetter.objects.get(job_id=stuck.id).exception == "django_jobs.exceptions.JobTimeout"
    assert SideEffect.objects.filter(key="next").count() == 1  # on its first attempt


@pytest.mark.usefixtures("fast")
def test_the_supervisor_reopens_a_connection_a_cut_broke_once_the_database_is_back(db_link, redis_db):
    connection.set_autocommit(False)  # no commit hook: only the relay delivers the row
    handle = jobs.record.enqueue("relayed")
    OutboxEntry.objects.update(created_at=timezone.now() - dt.timedelta(seconds=5))
    connection.commit()
    connection.set_autocommit(True)
    maintenance = Maintenance(Store.of(get_connection("default")), ["default"], 0.1)
    db_link.cut()
    maintenance.tick()  # the relay fails on the cut, and leaves its connection broken
    db_link.restore()
    wait_for(lambda: maintenance.tick() or redis_db.exists(f"rq:job:{handle.id}"), timeout=5)
    assert not OutboxEntry.objects.exists()


def test_a_request_cut_off_from_its_database_fails_and_enqueues_nothing(db_link, redis_db: redis.Redis):
    with pytest.raises(OperationalError), transaction.atomic():
        Item.objects.create(name="cut off")
        jobs.record.enqueue("never")
        db_link.cut()
    db_link.restore()
    connection.close()  # as Django does at the end of the failed request
    assert not Item.objects.exists() and not OutboxEntry.objects.exists()
    assert not redis_db.keys("rq:*")
