"""verify_crash_safe: the job killed after each statement, commit and declared effect, then retried;
each crash point whose end differs from a run without a crash is named, with what differs."""

from __future__ import annotations

import dataclasses
import re

import pytest
from django.test import TestCase, override_settings

from django_jobs.testing import NotCrashSafe, verify_crash_safe
from django_jobs.testing.examples import verify_examples
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_write_that_commits_before_the_crash_is_written_again_by_the_retry():
    with pytest.raises(NotCrashSafe) as caught:
        verify_crash_safe(jobs.record, "r-1")
    message = str(caught.value)
    assert message.startswith(
        "tests.record('r-1') is not crash-safe: after 1 of the 1 crash points tried, the retry ends "
    )
    assert (
        "- a crash after the INSERT into `testapp_sideeffect` (jobs.py, line 25) leaves 2 rows in " in message
    )
    assert "`testapp_sideeffect` against 1" in message
    assert isinstance(caught.value, AssertionError)


def test_guarded_jobs_and_an_upsert_are_crash_safe_and_the_database_is_left_as_it_was():
    Item.objects.create(name="kept")
    verify_crash_safe(jobs.record_once, "g-1")
    verify_crash_safe(jobs.upsert_item, "ada")
    verify_crash_safe(jobs.mail_invoice, "ada@example.com", once=True)
    verify_crash_safe(jobs.transfer, "t-1", atomic=True)
    assert list(Item.objects.values_list("name", flat=True)) == ["kept"]
    assert not SideEffect.objects.exists()


def test_a_mail_sent_before_the_commit_that_records_it_is_sent_again():
    with pytest.raises(NotCrashSafe) as caught:
        verify_crash_safe(jobs.mail_then_record, "bo@example.com")
    assert (
        "and before the commit sends the mail to bo@example.com ('Your receipt') twice against once"
        in str(caught.value)
    )


def test_an_enqueue_before_the_commit_is_repeated_unless_its_unique_key_drops_it():
    with pytest.raises(NotCrashSafe, match=r"enqueues tests.record twice against once"):
        verify_crash_safe(jobs.enqueue_then_record, "e-1")
    verify_crash_safe(jobs.enqueue_then_record, "e-2", unique=True)


def test_an_outside_call_before_the_commit_without_a_key_is_made_twice_and_one_with_a_key_is_not():
    with pytest.raises(NotCrashSafe) as caught:
        verify_crash_safe(jobs.charge_then_record, "42")
    assert re.search(
        r"a crash after `a charge of order 42 at the payment gateway` \(jobs.py, line \d+\) and before the "
        r"commit makes a charge of order 42 at the payment gateway twice against once: pass an "
        r"idempotency key to the outside service",
        str(caught.value),
    )
    verify_crash_safe(jobs.charge_then_record, "43", keyed=True)


def test_a_job_safe_only_without_a_crash_between_two_commits_is_named_at_the_first_commit():
    with pytest.raises(NotCrashSafe) as caught:
        verify_crash_safe(jobs.transfer, "t-2")
    message = str(caught.value)
    assert "a crash after the commit (jobs.py, line " in message
    assert "leaves 3 rows in `testapp_sideeffect` against 2" in message


@override_settings(JOBS={"VERIFY_CRASH_POINTS": 2})
def test_a_job_with_more_points_than_the_setting_is_sampled_commits_first():
    with pytest.raises(NotCrashSafe) as caught:
        verify_crash_safe(jobs.transfer, "t-3")  # 4 points: two INSERTs, each in its transaction
    message = str(caught.value)
    assert "after 2 of the 2 crash points tried" in message  # of its 4 points, the 2 commits
    assert message.count("- a crash after the commit") == 2
    assert "leaves 4 rows in `testapp_sideeffect` against 2" in message  # both writes done again


def test_a_job_that_fails_without_a_crash_is_an_assertion_error_saying_so():
    with pytest.raises(AssertionError, match=r"tests.permanent failed without a crash \(PermanentError: "):
        verify_crash_safe(jobs.permanent, "x")


class InsideATestCase(TestCase):
    def test_it_refuses_to_run_in_a_transaction_and_says_what_to_use(self) -> None:
        with pytest.raises(AssertionError, match=r"use TransactionTestCase"):
            verify_crash_safe(jobs.record_once, "in-a-test-case")


def test_declared_examples_run_both_checks_each_from_an_empty_database():
    declared = dataclasses.replace(jobs.record, examples=(["x"], {"key": "y"}, lambda: ("z",)))
    verdicts = list(verify_examples(declared))
    assert [v.call for v in verdicts] == ["tests.record('x')", "tests.record(key='y')", "tests.record('z')"]
    for verdict in verdicts:
        assert [finding.split(" is not ")[1][:10] for finding in verdict.findings] == [
            "idempotent",
            "crash-safe",
        ]
    assert not SideEffect.objects.exists()  # emptied before each check, and put back by the last


def test_an_async_job_is_checked_for_idempotency_only_and_a_broken_example_is_a_finding():
    (verdict,) = verify_examples(dataclasses.replace(jobs.async_record, examples=(["a"],)))
    assert not verdict.crash_checked
    assert len(verdict.findings) == 1 and "is not idempotent" in verdict.findings[0]
    (broken,) = verify_examples(dataclasses.replace(jobs.record_once, examples=(lambda: 7,)))
    assert broken.findings[0] == (
        "verify_idempotent could not run it: TypeError: an example returned int, not a dict or a list of "
        "arguments"
    )
