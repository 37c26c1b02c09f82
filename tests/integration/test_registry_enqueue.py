"""A plain call is not a job; an unknown queue fails at the first enqueue, a known one queues."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobs import job
from django_jobs.exceptions import ConfigurationError
from django_jobs.models import OutboxEntry

pytestmark = pytest.mark.usefixtures("restore_registry")


def test_a_plain_call_runs_inline_and_returns_the_value(redis_db):
    @job(name="unit.reg.add", timeout=5)
    def add(a, b, *, c=0):
        return a + b + c

    assert add(2, 3, c=4) == 9
    assert redis_db.dbsize() == 0  # a plain call is not a job


@pytest.mark.django_db  # the configured queue's enqueue writes its ledger row
def test_an_unknown_queue_is_fine_at_decoration_but_not_at_enqueue(redis_db):
    @job(name="unit.reg.reports", timeout=5, queue="reports")
    def build_report(report_id):
        return report_id

    assert build_report.queue == "reports"
    assert build_report(7) == 7
    with pytest.raises(ConfigurationError, match=r"Queue 'reports' is not in settings.RQ_QUEUES") as info:
        build_report.enqueue(7)
    assert isinstance(info.value, ImproperlyConfigured)
    with pytest.raises(ConfigurationError):
        build_report.enqueue_many([[1], [2]])
    with pytest.raises(ConfigurationError):
        build_report.enqueue_in(10, 1)
    assert redis_db.dbsize() == 0 and not OutboxEntry.objects.exists()  # no row of a job never enqueued
    with override_settings(RQ_QUEUES={**settings.RQ_QUEUES, "reports": settings.RQ_QUEUES["default"]}):
        handle = build_report.enqueue(7)  # the same job works once the queue is configured
    assert handle.queue == "reports"
    assert redis_db.llen("rq:queue:reports") == 1
