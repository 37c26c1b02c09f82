"""Payload rules at enqueue, seen from Redis: what is refused queues nothing, what passes is there."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from rq.job import Job as RQJob
from rq.serializers import JSONSerializer

from django_jobs.core import payload
from django_jobs.exceptions import PayloadError
from django_jobs.models import OutboxEntry
from tests.testapp import jobs
from tests.testapp.models import Item


@pytest.mark.django_db  # the small one's ledger row
def test_enqueue_refuses_a_payload_over_max_payload_bytes(redis_db):
    with override_settings(JOBS={**settings.JOBS, "MAX_PAYLOAD_BYTES": 200}):
        with pytest.raises(
            PayloadError, match=r"tests\.record payload is \d+ bytes.*MAX_PAYLOAD_BYTES.*\(200\)"
        ):
            jobs.record.enqueue("x" * 300)
        assert redis_db.llen("rq:queue:default") == 0
        jobs.record.enqueue("x" * 20)  # a small one still goes through under the same limit
    assert redis_db.llen("rq:queue:default") == 1


def test_default_limit_is_64_kib(redis_db):
    with pytest.raises(PayloadError, match=r"\(65536\)"):
        jobs.record.enqueue("x" * (64 * 1024))
    assert redis_db.dbsize() == 0


def test_data_written_by_rq_itself_is_read_back(redis_db):
    """RQ zlib-compresses ``data`` when it saves a job (requeue from django-rq's admin goes through it)."""
    args, kwargs = payload.encode([uuid.UUID(int=7)], {"amount": Decimal("1.10")})
    rq_job = RQJob.create(
        func="tests.record", args=args, kwargs=kwargs, serializer=JSONSerializer, connection=redis_db
    )
    written = rq_job.to_dict()["data"]
    assert written != JSONSerializer.dumps(["tests.record", None, args, kwargs])  # compressed
    assert payload.loads(written) == ("tests.record", [uuid.UUID(int=7)], {"amount": Decimal("1.10")})


@pytest.mark.django_db
def test_enqueue_with_a_model_instance_raises_at_enqueue_and_queues_nothing(redis_db):
    item = Item.objects.create(name="widget")
    with pytest.raises(PayloadError, match=r"argument #0 is a model instance \(Item\).*item\.pk"):
        jobs.record.enqueue(item)
    with pytest.raises(PayloadError, match=r"argument 'item' is a model instance \(Item\)"):
        jobs.echo_types.enqueue("k", item=item)
    assert redis_db.dbsize() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_a_transaction_raises_at_once_not_at_commit(redis_db):
    item = Item.objects.create(name="widget")
    with transaction.atomic():
        with pytest.raises(PayloadError, match=r"item\.pk"):
            jobs.record.enqueue(item)
        assert OutboxEntry.objects.count() == 0
        jobs.record.enqueue(str(item.pk))  # the fix the message suggests works
    assert redis_db.llen("rq:queue:default") == 1
