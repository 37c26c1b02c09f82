"""The batches' admin: progress and callback states, the members that did not succeed with their
jobs and dead letters, *Reconcile now*; each behind its permission, a 403 without it."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from django_jobs.core import outcomes
from django_jobs.models import Batch, BatchMember, DeadLetter
from django_jobs.workflows.batches import batch
from tests.integration.dashboard_support import operator
from tests.integration.test_batches import drain, without_batch_subscriber
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

CHANGELIST = reverse("admin:django_jobs_batch_changelist")


def a_batch_with_one_of_each() -> tuple[Batch, DeadLetter]:
    """Succeeded, dead-lettered and still waiting (due in an hour): open, 2 of 3 ended."""
    with batch(
        on_success=jobs.batch_done.bind("cb-success"),
        on_complete=jobs.batch_done.bind("cb-complete"),
        name="monthly export",
    ) as created:
        jobs.record.enqueue("fine")
        jobs.needs_fix.enqueue("broken")
        jobs.record.enqueue_in(3600, "later")
    drain()
    return created, DeadLetter.objects.get(job_name="tests.needs_fix")


def test_the_list_shows_progress_and_the_callbacks_state(client):
    a_batch_with_one_of_each()
    operator(client, "view_batch")
    page = client.get(CHANGELIST).content.decode()
    assert "monthly export" in page and "open" in page
    assert '<progress max="3" value="2"></progress> 2 / 3' in page
    assert "1 succeeded · 1 ended · 1 pending" in page
    assert "on_success: pending, on_complete: pending" in page


def test_a_batch_page_lists_the_members_that_did_not_succeed_with_their_jobs_and_dead_letters(client):
    created, dead = a_batch_with_one_of_each()
    operator(client, "view_batch")
    page = client.get(reverse("admin:django_jobs_batch_change", args=[created.pk])).content.decode()
    broken = BatchMember.objects.get(job_name="tests.needs_fix")
    later = BatchMember.objects.get(state="pending")
    assert reverse("admin:django_jobs_deadletter_job", args=[broken.job_id]) in page
    assert reverse("admin:django_jobs_deadletter_change", args=[dead.pk]) in page
    assert reverse("admin:django_jobs_deadletter_job", args=[later.job_id]) in page
    assert "dead-lettered" in page and 'id="batch-callbacks"' in page
    fine = BatchMember.objects.get(state="succeeded")
    assert fine.job_id not in page  # succeeded members are counted, not listed
    assert 'name="_save"' not in page  # read-only


def test_reconcile_now_settles_what_the_sweep_would_and_is_logged(client):
    with batch(on_complete=jobs.batch_done.bind("cb-complete")) as created:
        jobs.record.enqueue("a")
    saved = without_batch_subscriber()
    try:
        drain()  # the end is settled in Redis, its event lost
    finally:
        outcomes.connect(saved)
    user = operator(client, "view_batch", "change_batch")
    response = client.post(CHANGELIST, {"action": "reconcile", "_selected_action": [created.pk]}, follow=True)
    assert "Reconciled 1 open batch(es): 1 member(s) settled." in response.content.decode()
    assert Batch.objects.get(pk=created.pk).status == Batch.Status.SUCCEEDED
    assert LogEntry.objects.get(user=user).change_message == "Reconciled the batch with Redis"


def test_without_permission_the_batches_are_refused(client):
    created, _ = a_batch_with_one_of_each()
    operator(client, "view_deadletter")
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(reverse("admin:django_jobs_batch_change", args=[created.pk])).status_code == 403
    operator(client, "view_batch", username="viewer")
    response = client.post(CHANGELIST, {"action": "reconcile", "_selected_action": [created.pk]})
    assert response.status_code == 403
    assert 'value="reconcile"' not in client.get(CHANGELIST).content.decode()


def test_a_members_job_page_links_to_its_batch(client):
    created, _ = a_batch_with_one_of_each()
    broken = BatchMember.objects.get(job_name="tests.needs_fix")
    operator(client, "view_deadletter")
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[broken.job_id])).content.decode()
    assert reverse("admin:django_jobs_batch_change", args=[created.pk]) in page
    assert "monthly export" in page and "ended (dead-lettered)" in page
