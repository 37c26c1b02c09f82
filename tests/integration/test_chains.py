"""Chains of page jobs, run in-process: checkpoints, duplicates, pause, resume and cancel."""

from __future__ import annotations

import pytest

from django_jobs.models import Chain
from django_jobs.testing import run_jobs
from django_jobs.workflows import chains
from tests.testapp import jobs
from tests.testapp.models import Item, SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def items(n):
    Item.objects.bulk_create([Item(name=f"i{i}") for i in range(n)])


def processed():
    return sorted(SideEffect.objects.filter(key__startswith="item:").values_list("key", flat=True))


def test_a_chain_runs_page_by_page_to_the_end():
    items(23)
    started = jobs.sync_items.start(page_size=10)
    run_jobs()
    done = Chain.objects.get(pk=started.pk)
    assert done.status == Chain.Status.DONE
    assert (done.pages_done, done.items_done) == (3, 23)
    assert done.finished_at is not None
    assert len(processed()) == 23 == len(set(processed()))


def test_a_duplicate_page_does_nothing(redis_db):
    items(10)
    started = jobs.sync_items.start(page_size=4)
    jobs.sync_items.page.enqueue(str(started.pk), None)  # the first page, delivered twice
    run_jobs()
    assert len(processed()) == 10 == len(set(processed()))
    assert Chain.objects.get(pk=started.pk).pages_done == 3


def test_pause_stops_after_the_running_page_and_resume_carries_on():
    items(12)
    started = jobs.sync_items.start(page_size=4)
    assert chains.pause(started.pk)
    run_jobs()
    assert processed() == [] and Chain.objects.get(pk=started.pk).status == Chain.Status.PAUSED
    assert chains.resume(started.pk)
    run_jobs()
    assert len(processed()) == 12 and Chain.objects.get(pk=started.pk).status == Chain.Status.DONE
    assert not chains.resume(started.pk)  # finished chains do not restart


def test_cancel_stops_for_good():
    items(12)
    started = jobs.sync_items.start(page_size=4)
    assert chains.cancel(started.pk)
    run_jobs()
    assert processed() == []
    assert not chains.resume(started.pk)
    assert Chain.objects.get(pk=started.pk).status == Chain.Status.CANCELLED


def test_kwargs_follow_the_payload_rules():
    from django_jobs.exceptions import PayloadError

    with pytest.raises(PayloadError, match="model instance"):
        jobs.sync_items.start(page_size=Item(name="x"))


def test_the_admin_shows_progress_and_pauses_by_post(client):
    from django.contrib.auth.models import User
    from django.urls import reverse

    items(30)
    started = jobs.sync_items.start(page_size=10)
    run_jobs()
    paused = jobs.sync_items.start(page_size=10)
    client.force_login(User.objects.create_superuser("admin", password="pw"))
    page = client.get(reverse("admin:django_jobs_chain_changelist")).content.decode()
    assert str(started.pk) in page and "&nbsp;pages, 30&nbsp;items" in page  # its link, and its progress
    assert f"q={started.pk}" in page  # the link to its dead letters
    client.post(
        reverse("admin:django_jobs_chain_changelist"), {"action": "pause", "_selected_action": [paused.pk]}
    )
    assert Chain.objects.get(pk=paused.pk).status == Chain.Status.PAUSED
