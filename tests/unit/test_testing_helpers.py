"""The helpers projects use in their own tests: capture_jobs(), immediate_jobs() and the pytest fixtures."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from unittest import mock

import pytest
from django.conf import settings
from django.db import connections, transaction
from django.http import HttpResponse
from django.test import TestCase, override_settings
from django.urls import path

from django_jobs.conf import jobs_settings
from django_jobs.exceptions import PayloadError
from django_jobs.models import OutboxEntry
from django_jobs.testing import capture_jobs, immediate_jobs
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect


def keys():
    return sorted(SideEffect.objects.values_list("key", flat=True))


# --- capture_jobs() ------------------------------------------------------------------------------


def test_capture_switches_mode_only_inside_the_block():
    before = jobs_settings.MODE
    with capture_jobs():
        assert jobs_settings.MODE == "capture"
    assert jobs_settings.MODE == before == "queue"
    assert settings.JOBS.get("MODE") is None  # the test settings are restored as they were


def test_capture_still_refuses_bad_payloads():
    with capture_jobs() as captured, pytest.raises(PayloadError, match=r"item\.pk"):
        jobs.record.enqueue(Item(pk=1, name="x"))
    assert len(captured) == 0


def test_assert_enqueued_matches_exact_arguments():
    when = dt.datetime(2026, 3, 29, 1, 30, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    with capture_jobs() as captured:
        handle = jobs.fails_then_succeeds.enqueue("k", failures=2)
        jobs.echo_types.enqueue("t", when=when)
    found = captured.assert_enqueued(jobs.fails_then_succeeds, "k", failures=2)
    assert found.id == handle.id
    assert (
        captured.assert_enqueued("tests.echo_types", "t", when=when).kwargs["when"].tzinfo.key
        == "Europe/Paris"
    )
    assert [j.name for j in captured.named(jobs.echo_types)] == ["tests.echo_types"]


@pytest.mark.parametrize(
    ("job", "args", "kwargs", "expected"),
    [
        (jobs.record, ("other",), {}, "tests.record('other')"),  # wrong argument
        (jobs.record, ("a", "b"), {}, "tests.record('a', 'b')"),  # extra argument
        (jobs.record, (), {"nokey": "a"}, "tests.record(nokey='a')"),  # no such parameter
        (jobs.renamed, ("a",), {}, "tests.new_name('a')"),  # a job that was not enqueued
    ],
)
def test_assert_enqueued_fails_with_what_was_captured(job, args, kwargs, expected):
    with capture_jobs() as captured:
        jobs.record.enqueue("a")
        jobs.fails_then_succeeds.enqueue("z", failures=1)
    with pytest.raises(AssertionError) as info:
        captured.assert_enqueued(job, *args, **kwargs)
    lines = str(info.value).splitlines()
    assert lines[0] == f"expected one {expected}, found none; captured:"
    assert lines[1:] == ["  tests.record('a')", "  tests.fails_then_succeeds('z', failures=1)"]


@pytest.mark.parametrize(
    ("enqueued", "asserted"),
    [
        ((("a",), {}), ((), {"key": "a"})),  # positional, asserted by keyword
        (((), {"key": "a"}), (("a",), {})),  # keyword, asserted positionally
    ],
)
def test_assert_enqueued_matches_a_call_however_its_arguments_were_passed(enqueued, asserted):
    with capture_jobs() as captured:
        handle = jobs.record.enqueue(*enqueued[0], **enqueued[1])
    assert captured.assert_enqueued(jobs.record, *asserted[0], **asserted[1]).id == handle.id
    assert captured.assert_enqueued("tests.record", *asserted[0], **asserted[1]).id == handle.id


def test_assert_enqueued_applies_defaults_on_both_sides():
    with capture_jobs() as captured:
        jobs.greet.enqueue("k")
        handle = jobs.greet.enqueue("k", "hi")
    assert captured.assert_enqueued(jobs.greet, "k", greeting="hi").id == handle.id
    with capture_jobs() as twice:
        jobs.greet.enqueue("k")
        jobs.greet.enqueue("k", greeting="hello")
    with pytest.raises(AssertionError, match=r"found 2 such calls"):
        twice.assert_enqueued(jobs.greet, key="k")


def test_assert_enqueued_fails_when_the_same_call_was_enqueued_twice():
    with capture_jobs() as captured:
        jobs.record.enqueue("a")
        jobs.record.enqueue("a")
    with pytest.raises(AssertionError, match=r"expected one"):
        captured.assert_enqueued(jobs.record, "a")


@pytest.mark.django_db
def test_captured_jobs_can_be_run_afterwards():
    with capture_jobs() as captured:
        jobs.record.enqueue("later")
    assert keys() == []
    captured.run()
    assert keys() == ["later"]


@pytest.mark.django_db(transaction=True)  # the async ORM writes from a thread of its own
def test_captured_async_jobs_run_too():
    with capture_jobs() as captured:
        jobs.async_compute.enqueue("async-later")
        jobs.record.enqueue("sync-later")
    captured.run()
    assert keys() == ["async-later", "sync-later"]


def test_nested_capture_blocks_both_see_inner_jobs():
    with capture_jobs() as outer:
        jobs.record.enqueue("1")
        with capture_jobs() as inner:
            jobs.record.enqueue("2")
        jobs.record.enqueue("3")
    assert [j.args for j in inner] == [["2"]]
    assert [j.args for j in outer] == [["1"], ["2"], ["3"]]


@pytest.mark.django_db(transaction=True)
def test_capture_inside_a_transaction_records_at_commit():
    with capture_jobs() as captured:
        with transaction.atomic():
            jobs.record.enqueue("committed")
            assert len(captured) == 0  # not before the commit
        assert [j.args for j in captured] == [["committed"]]
    assert OutboxEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_capture_drops_jobs_of_a_rolled_back_savepoint_only():
    with capture_jobs() as captured:
        with transaction.atomic():
            jobs.record.enqueue("outer")
            with pytest.raises(RuntimeError), transaction.atomic():
                jobs.record.enqueue("inner")
                raise RuntimeError
        assert [j.args for j in captured] == [["outer"]]


# --- immediate_jobs() ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_immediate_propagates_the_jobs_exception():
    with immediate_jobs(), pytest.raises(ConnectionError, match="upstream down"):
        jobs.always_fails.enqueue("x")


@pytest.mark.django_db(transaction=True)
def test_immediate_inside_a_transaction_runs_at_commit():
    with immediate_jobs():
        with transaction.atomic():
            jobs.record.enqueue("at-commit")
            assert keys() == []  # not yet: the transaction might still roll back
        assert keys() == ["at-commit"]


@pytest.mark.django_db(transaction=True)
def test_immediate_inside_a_rolled_back_transaction_never_runs():
    with immediate_jobs(), pytest.raises(RuntimeError), transaction.atomic():
        jobs.record.enqueue("never")
        raise RuntimeError
    assert keys() == []
    assert OutboxEntry.objects.count() == 0


# --- Django TestCase -----------------------------------------------------------------------------


class HelpersInsideTestCase(TestCase):
    """TestCase wraps each test in a transaction that never commits; the helpers must not wait for it."""

    def test_capture_works_without_capture_on_commit_callbacks(self):
        with capture_jobs() as captured:
            jobs.record.enqueue("in-testcase")
        captured.assert_enqueued(jobs.record, "in-testcase")
        assert OutboxEntry.objects.count() == 0

    def test_immediate_works_without_capture_on_commit_callbacks(self):
        with immediate_jobs():
            jobs.record.enqueue("in-testcase")
        assert list(SideEffect.objects.values_list("key", flat=True)) == ["in-testcase"]

    def test_immediate_jobs_see_rows_of_the_test(self):
        item = Item.objects.create(name="widget")
        with immediate_jobs():
            jobs.record.enqueue(f"item:{item.pk}")
        assert SideEffect.objects.filter(key=f"item:{item.pk}").exists()


def _signup(key, *, fail=False):
    """Code under test in the Quick start's pattern: its own transaction, the job enqueued inside."""
    with transaction.atomic():
        Item.objects.create(name=key)
        jobs.record.enqueue(key)
        if fail:
            raise RuntimeError("rolled back")


def _view(request):
    jobs.record.enqueue(request.GET["key"])
    if "fail" in request.GET:
        raise RuntimeError("the view failed")
    return HttpResponse("ok")


urlpatterns = [path("signup/", _view)]


def _captured_keys(captured):
    return [j.args[0] for j in captured]


class HelpersSeeJobsOfTheCodesOwnTransactions(TestCase):
    """Inside TestCase, the code under test's atomic() is a savepoint; its jobs still count, at its end."""

    def test_capture_records_a_job_enqueued_inside_atomic(self):
        with capture_jobs() as captured:
            _signup("welcome")
        captured.assert_enqueued(jobs.record, "welcome")
        assert OutboxEntry.objects.count() == 0

    def test_capture_records_at_the_end_of_the_outermost_block_not_before(self):
        with capture_jobs() as captured, transaction.atomic():
            jobs.record.enqueue("outer")
            with transaction.atomic():
                jobs.record.enqueue("inner")
            assert len(captured) == 0  # the inner block's end is no commit
        assert _captured_keys(captured) == ["outer", "inner"]

    def test_a_rolled_back_block_drops_its_jobs_and_only_its_jobs(self):
        with capture_jobs() as captured:
            with pytest.raises(RuntimeError):
                _signup("rolled-back", fail=True)
            with transaction.atomic():
                jobs.record.enqueue("kept")
                with pytest.raises(RuntimeError), transaction.atomic():
                    jobs.record.enqueue("savepoint-rolled-back")
                    raise RuntimeError
            _signup("after")
        assert _captured_keys(captured) == ["kept", "after"]

    def test_immediate_runs_the_job_when_the_codes_transaction_ends(self):
        with immediate_jobs():
            with transaction.atomic():
                jobs.record.enqueue("welcome")
                assert keys() == []  # not yet: the block might still roll back
            assert keys() == ["welcome"]
            with pytest.raises(RuntimeError):
                _signup("never", fail=True)
        assert keys() == ["welcome"]

    def test_capture_on_commit_callbacks_does_not_deliver_twice(self):
        with capture_jobs() as captured, self.captureOnCommitCallbacks(execute=True):
            _signup("once")
        assert _captured_keys(captured) == ["once"]

    @override_settings(ROOT_URLCONF=__name__)
    def test_atomic_requests_deliver_when_the_request_succeeds(self):
        connection = connections["default"]
        with mock.patch.dict(connection.settings_dict, {"ATOMIC_REQUESTS": True}), capture_jobs() as captured:
            assert self.client.get("/signup/", {"key": "ok"}).status_code == 200
            with pytest.raises(RuntimeError):
                self.client.get("/signup/", {"key": "failed", "fail": "1"})
        assert _captured_keys(captured) == ["ok"]


@pytest.mark.django_db
@pytest.mark.parametrize("helper", [capture_jobs, immediate_jobs])
def test_pytest_django_sees_jobs_of_the_codes_own_transactions(helper):
    with helper() as captured:
        _signup("welcome")
        with pytest.raises(RuntimeError):
            _signup("rolled-back", fail=True)
    if captured is None:
        assert keys() == ["welcome"]
    else:
        assert _captured_keys(captured) == ["welcome"]


@pytest.mark.django_db
def test_the_jobs_captured_fixture_sees_jobs_of_the_codes_own_transactions(jobs_captured):
    _signup("welcome")
    with pytest.raises(RuntimeError):
        _signup("rolled-back", fail=True)
    jobs_captured.assert_enqueued(jobs.record, key="welcome")
    assert len(jobs_captured) == 1


# --- pytest fixtures -----------------------------------------------------------------------------
