"""Flow control across processes: per-job-type concurrency limits hold over several runjobs."""

from __future__ import annotations

import pytest

from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_concurrency_limit_holds_across_three_runjobs_with_two_workers_each(runjobs):
    jobs.limited.enqueue_many([(f"c{i}", 0.15) for i in range(50)])
    for _ in range(3):
        runjobs("--concurrency", "2")
    wait_for(lambda: SideEffect.objects.count() == 50, timeout=60)
    rows = [key.split("|") for key in SideEffect.objects.values_list("key", flat=True)]
    assert sorted(r[0] for r in rows) == sorted(f"c{i}" for i in range(50))
    overlap = max_overlap([(float(r[1]), float(r[2])) for r in rows])
    assert 2 <= overlap <= 3  # never more than the limit, and the limit is actually used
