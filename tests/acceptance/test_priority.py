"""Priorities with a real worker: jobs queued while no worker runs start in priority order, highest
first, equal priorities in the order they were enqueued."""

from __future__ import annotations

import random
import subprocess

import pytest

from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_a_thousand_jobs_with_random_priorities_start_in_priority_order(runjobs):
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    priorities = [rng.randint(-100, 100) for _ in range(1000)]
    for index, priority in enumerate(priorities):
        jobs.record.options(priority=priority).enqueue(f"{index}:{priority}")

    worker = runjobs("--burst", "--burst-wait", "0", "--concurrency", "1")
    try:
        assert worker.proc.wait(120) == 0, worker.output()
    except subprocess.TimeoutExpired:
        raise AssertionError(f"runjobs --burst still running:\n{worker.output()}") from None

    ran = list(SideEffect.objects.order_by("pk").values_list("key", flat=True))
    expected = [f"{i}:{p}" for i, p in sorted(enumerate(priorities), key=lambda pair: (-pair[1], pair[0]))]
    assert ran == expected, f"seed {seed}"
