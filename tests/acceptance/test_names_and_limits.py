"""A concurrency limit holds for a job queued under its old name and its new one, across runjobs."""

from __future__ import annotations

import pytest

from django_jobs import registry
from django_jobs.enqueue import build, push
from tests.acceptance.test_flow_control import max_overlap
from tests.conftest import wait_for
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_jobs_queued_under_an_alias_and_the_new_name_never_run_at_once(runjobs):
    names = ["tests.solo_before_rename", "tests.solo"] * 4  # queued before and after a rename
    timeout = registry.get("tests.solo").timeout
    push([build(name, "default", timeout, [f"s{i}", 0.3], {}) for i, name in enumerate(names)])
    runjobs("--concurrency", "2")
    runjobs("--concurrency", "2")
    wait_for(lambda: SideEffect.objects.count() == len(names), timeout=60)
    rows = [key.split("|") for key in SideEffect.objects.values_list("key", flat=True)]
    assert max_overlap([(float(r[1]), float(r[2])) for r in rows]) == 1
