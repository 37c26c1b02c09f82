"""The test modes keep Redis untouched, and queue mode still waits for a real commit."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from django.db import transaction

from django_jobs.models import OutboxEntry
from django_jobs.testing import Captured, CapturedJob, capture_jobs, immediate_jobs
from tests.testapp import jobs
from tests.testapp.models import SideEffect
from tests.unit.test_testing_helpers import _signup, keys


def test_capture_records_jobs_with_decoded_args_and_queues_nothing(redis_db):
    user_id = uuid.UUID(int=42)
    with capture_jobs() as captured:
        handle = jobs.record.enqueue("a")
        jobs.echo_types.enqueue("b", user=user_id, amount=Decimal("1.10"), day=dt.date(2026, 1, 2))
    assert len(captured) == 2
    first, second = captured
    assert first == CapturedJob(id=handle.id, name="tests.record", queue="default", args=["a"], kwargs={})
    assert second.name == "tests.echo_types"
    assert second.kwargs == {"user": user_id, "amount": Decimal("1.10"), "day": dt.date(2026, 1, 2)}
    assert type(second.kwargs["user"]) is uuid.UUID
    assert str(second.kwargs["amount"]) == "1.10"
    assert redis_db.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_capture_inside_a_rolled_back_transaction_records_nothing(redis_db):
    with capture_jobs() as captured:
        with pytest.raises(RuntimeError), transaction.atomic():
            jobs.record.enqueue("never")
            raise RuntimeError("rollback")
        assert len(captured) == 0
    assert len(captured) == 0
    assert OutboxEntry.objects.count() == 0
    assert redis_db.dbsize() == 0


@pytest.mark.django_db
def test_immediate_runs_the_job_inline_with_decoded_args(redis_db):
    with immediate_jobs():
        jobs.record.enqueue("now")
        assert keys() == ["now"]
        jobs.echo_types.enqueue("t", amount=Decimal("1.10"), user=uuid.UUID(int=1))
    row = SideEffect.objects.exclude(key="now").get().key
    assert "('amount', 'Decimal', \"Decimal('1.10')\")" in row
    assert "('user', 'UUID', \"UUID('00000000-0000-0000-0000-000000000001')\")" in row
    assert redis_db.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_queue_mode_in_a_real_transaction_still_waits_for_the_commit(redis_db):
    with transaction.atomic():
        _signup("queued")
        assert OutboxEntry.objects.count() == 0 and redis_db.llen("rq:queue:default") == 0
    assert redis_db.llen("rq:queue:default") == 1


def test_jobs_captured_fixture(jobs_captured, redis_db):
    assert isinstance(jobs_captured, Captured)
    jobs.record.enqueue("fixture")
    jobs_captured.assert_enqueued(jobs.record, "fixture")
    assert len(jobs_captured) == 1
    assert redis_db.dbsize() == 0


@pytest.mark.django_db
def test_jobs_immediate_fixture(jobs_immediate, redis_db):
    jobs.record.enqueue("fixture")
    assert keys() == ["fixture"]
    assert redis_db.dbsize() == 0
