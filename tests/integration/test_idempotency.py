"""idempotent() and claim_key() on the real database: one side effect per key, released on failure."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_jobs import claim, claim_key, idempotent
from django_jobs.flow.idempotency import prune
from django_jobs.models import IdempotencyKey
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_first_claim_wins_and_later_ones_see_it_done():
    with idempotent("k") as first:
        assert first
        SideEffect.objects.create(key="k")
    with idempotent("k") as again:
        assert not again
    assert IdempotencyKey.objects.filter(key="k").count() == 1


def test_a_failing_body_releases_the_claim_for_the_retry():
    with pytest.raises(ConnectionError), idempotent("k") as first:
        assert first
        SideEffect.objects.create(key="k")
        raise ConnectionError
    assert not IdempotencyKey.objects.exists()
    assert not SideEffect.objects.exists()
    with idempotent("k") as retry:
        assert retry


def test_nested_in_a_transaction_it_is_a_savepoint():
    with transaction.atomic():
        SideEffect.objects.create(key="outer")
        with pytest.raises(ValueError, match="boom"), idempotent("k"):
            raise ValueError("boom")
        with idempotent("k") as first:
            assert first
    assert SideEffect.objects.filter(key="outer").exists()
    assert IdempotencyKey.objects.filter(key="k").exists()


def test_claim_is_one_statement_that_reports_whether_it_inserted(django_assert_num_queries):
    with django_assert_num_queries(1):
        assert claim_key("one")
    with django_assert_num_queries(1):
        assert not claim_key("one")


def test_bad_keys_are_refused():
    with pytest.raises(ValueError, match="1 to 255"):
        claim_key("")
    with pytest.raises(ValueError, match="1 to 255"):
        claim_key("x" * 256)


def test_prune_deletes_only_keys_older_than_the_retention():
    IdempotencyKey.objects.create(key="old", created_at=timezone.now() - dt.timedelta(days=40))
    IdempotencyKey.objects.create(key="new")
    with override_settings(JOBS={"IDEMPOTENCY_RETENTION": 30 * 24 * 3600}):
        assert prune() == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises writers; nothing waits")
def test_a_concurrent_duplicate_waits_for_the_first_holder_then_sees_it_done():
    results: dict[str, object] = {}
    holding = threading.Event()

    def first() -> None:
        with idempotent("race") as won:
            results["first"] = won
            holding.set()
            time.sleep(0.5)
        connections.close_all()

    def second() -> None:
        holding.wait()
        started = time.monotonic()
        with idempotent("race") as won:
            results["second"] = won
        results["waited"] = time.monotonic() - started
        connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["first"] is True
    assert results["second"] is False
    assert results["waited"] >= 0.3


@pytest.mark.django_db
def test_the_old_name_claim_still_claims_and_warns_it_is_deprecated():
    with pytest.warns(DeprecationWarning, match="claim_key"):
        assert claim("old-name")
    assert not claim_key("old-name")
