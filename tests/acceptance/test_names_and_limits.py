"""Names and tombstones under real runjobs: a limit holds across an alias and the new name, and a
debounced job that was replaced never runs, whatever its outbox row does later."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_jobs.client.backends.redis import push
from django_jobs.client.enqueue import build
from django_jobs.core import registry
from django_jobs.models import OutboxEntry
from tests.acceptance.test_flow_control import max_overlap
from tests.conftest import wait_for
from tests.testapp import jobs
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


def test_a_debounced_job_replaced_inside_a_transaction_never_runs_under_runjobs(runjobs, redis_db):
    handles = []
    for value in ("stale", "newer"):
        with transaction.atomic():  # each one's outbox row stays until the relay prunes it
            handles.append(jobs.debounced.options(unique_key="doc:9", debounce=0.1).enqueue(value))
    runjobs()  # "newer" runs at once; then the relay pushes both rows again

    def settled() -> bool:
        idle = not any(
            redis_db.exists(key) for key in ("rq:scheduled:default", "rq:queue:default", "rq:wip:default")
        )
        return idle and not OutboxEntry.objects.exists() and SideEffect.objects.exists()

    wait_for(settled, timeout=30)
    assert list(SideEffect.objects.values_list("key", flat=True)) == ["newer"]
    assert redis_db.hget(f"rq:job:{handles[0].id}", "status") == b"canceled"
