"""verify_idempotent: two deliveries of the same payload, through the worker's own attempt; the
second must repeat no effect of the first (rows, mails, enqueues, declared outside calls)."""

from __future__ import annotations

import pytest
from django.test import TestCase

from django_jobs.testing import NotIdempotent, verify_idempotent
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_insert_is_named_with_its_table():
    with pytest.raises(NotIdempotent) as caught:
        verify_idempotent(jobs.record, "invoice-7")
    assert str(caught.value).startswith(
        "tests.record('invoice-7') is not idempotent: the second delivery inserted 1 row into "
        "`testapp_sideeffect`. Guard the effect with django_jobs.idempotent()"
    )
    assert SideEffect.objects.filter(key="invoice-7").count() == 2  # both deliveries really ran


def test_an_async_jobs_writes_are_seen_in_the_thread_its_orm_calls_run_in():
    with pytest.raises(NotIdempotent, match=r"the second delivery inserted 1 row into `testapp_sideeffect`"):
        verify_idempotent(jobs.async_record, "async-1")


def test_an_idempotent_guarded_write_and_an_upsert_pass():
    verify_idempotent(jobs.record_once, "invoice-8")
    assert SideEffect.objects.filter(key="invoice-8").count() == 1
    verify_idempotent(jobs.upsert_item, "ada")
    assert Item.objects.filter(name="ada").count() == 1


def test_a_row_changed_again_is_a_repeat_even_without_an_insert():
    Item.objects.create(name="ada")
    with pytest.raises(NotIdempotent, match=r"the second delivery changed 1 row of `testapp_item`"):
        verify_idempotent(jobs.mark_item, "ada")


def test_a_second_mail_is_named_with_its_recipient_and_a_guarded_one_passes():
    with pytest.raises(
        NotIdempotent, match=r"the second delivery sent 1 mail to ada@example.com \('Your invoice'\)"
    ):
        verify_idempotent(jobs.mail_invoice, "ada@example.com")
    verify_idempotent(jobs.mail_invoice, "bob@example.com", once=True)


def test_a_second_enqueue_is_a_repeat_unless_its_unique_key_drops_it():
    with pytest.raises(NotIdempotent, match=r"the second delivery enqueued 1 job tests.record\."):
        verify_idempotent(jobs.enqueue_follow_up, "k1")
    verify_idempotent(jobs.enqueue_follow_up, "k2", unique=True)


def test_an_outside_call_without_an_idempotency_key_is_a_repeat_and_one_with_a_key_is_not():
    with pytest.raises(NotIdempotent) as caught:
        verify_idempotent(jobs.charge_card, "42")
    assert "made a charge of order 42 at the payment gateway without an idempotency key" in str(caught.value)
    verify_idempotent(jobs.charge_card, "43", keyed=True)


def test_every_repeat_is_named_in_one_message():
    with pytest.raises(NotIdempotent) as caught:
        verify_idempotent(jobs.mail_invoice, "cy@example.com")
    assert str(caught.value).count("sent 1 mail") == 1
    assert isinstance(caught.value, AssertionError)


def test_a_first_delivery_that_fails_is_an_assertion_error_saying_so():
    with pytest.raises(AssertionError, match=r"delivery 1 of tests.permanent failed \(PermanentError: "):
        verify_idempotent(jobs.permanent, "x")


class VerifyInATestCase(TestCase):
    """Inside Django's TestCase (its wrapping transaction), as a project's own tests would call it."""

    def test_it_works_in_a_test_case(self) -> None:
        verify_idempotent(jobs.record_once, "in-a-test-case")
        with pytest.raises(NotIdempotent):
            verify_idempotent(jobs.record, "in-a-test-case-2")
        assert SideEffect.objects.filter(key="in-a-test-case").count() == 1
