"""What a worker reads from Redis is bounded: a compressed ``data`` field is never inflated past
``JOBS["MAX_PAYLOAD_BYTES"]``, and a job whose data would be is quarantined, unrun."""

from __future__ import annotations

import tracemalloc
import uuid
import zlib

import pytest
from django.test import override_settings

from django_jobs.core import payload
from django_jobs.exceptions import PayloadError, PayloadTooLarge
from django_jobs.models import DeadLetter
from django_jobs.testing import run_jobs
from tests.testapp import jobs
from tests.testapp.models import SideEffect


def bomb(megabytes: int) -> bytes:
    """A job ``data`` field that inflates to ``megabytes`` MiB from a few KiB, as RQ would compress it."""
    packer = zlib.compressobj(9)
    parts = [packer.compress(b'["tests.record", null, ["')]
    parts += [packer.compress(b"a" * (1 << 20)) for _ in range(megabytes)]
    return b"".join([*parts, packer.compress(b'"], {}]'), packer.flush()])


def test_a_decompression_bomb_is_refused_without_inflating_it():
    data = bomb(50)
    tracemalloc.start()
    try:
        for decode in (payload.loads, payload.loads_tagged):
            with pytest.raises(PayloadTooLarge, match="MAX_PAYLOAD_BYTES"):
                decode(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # the cap (64 KiB) and change; inflating it would take 50 MiB


@override_settings(JOBS={"MAX_PAYLOAD_BYTES": 100})
@pytest.mark.parametrize(("size", "fits"), [(100, True), (101, False)])
def test_compressed_data_up_to_the_cap_decodes(size, fits):
    text = b'["tests.record", null, ["' + b"x" * (size - 32) + b'"], {}]'
    assert len(text) == size
    if fits:
        assert payload.loads(zlib.compress(text))[0] == "tests.record"
    else:
        with pytest.raises(PayloadTooLarge):
            payload.loads(zlib.compress(text))


def test_a_decoders_message_does_not_quote_the_value():
    data = b'["tests.record", null, [{"__t": "date", "v": "hunter2-secret"}], {}]'
    with pytest.raises(PayloadError) as caught:
        payload.loads(data)
    assert "hunter2" not in str(caught.value) and "'date' value does not decode" in str(caught.value)


@pytest.mark.django_db(transaction=True)
def test_a_job_whose_data_is_a_bomb_is_dead_lettered_unreadable_and_the_next_job_runs(redis_db):
    job_id = uuid.uuid4().hex
    redis_db.hset(
        f"rq:job:{job_id}",
        mapping={"data": bomb(20), "status": "queued", "origin": "default", "description": "tests.record"},
    )
    redis_db.rpush("rq:queue:default", job_id)
    jobs.record.enqueue("healthy")
    run_jobs()
    entry = DeadLetter.objects.get(job_id=job_id)
    assert entry.reason == DeadLetter.Reason.UNREADABLE
    assert entry.exception == "django_jobs.exceptions.PayloadTooLarge"
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["healthy"]
