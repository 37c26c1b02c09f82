"""Flow control across processes: per-job-type concurrency limits hold over several runjobs."""

from __future__ import annotations

import itertools

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


def test_four_schedulers_fire_each_period_exactly_once(runjobs):
    from django_jobs.models import CronRun

    env = {"JOBS_TEST_CRON": '{"tests.tick": "* * * * * *", "tests.hourly": null}'}  # every second
    workers = [runjobs(extra_env=env) for _ in range(4)]
    wait_for(lambda: CronRun.objects.count() >= 6, timeout=30)
    for worker in workers:
        assert worker.terminate() == 0, worker.output()
    periods = sorted(CronRun.objects.values_list("scheduled_for", flat=True))
    assert len(periods) == len(set(periods))  # never twice
    steps = {(b - a).total_seconds() for a, b in itertools.pairwise(periods)}
    assert steps == {1.0}  # and none missed between the first and the last
    runjobs("--burst")  # no scheduler of its own (cron is off by default): it drains what was fired
    wait_for(lambda: SideEffect.objects.filter(key="tick").count() == len(periods))


def test_a_long_sync_survives_two_sigkills_with_every_item_processed_once(runjobs):
    from django_jobs.models import Chain
    from tests.testapp.models import Item

    Item.objects.bulk_create([Item(name=f"i{i}") for i in range(1000)])
    started = jobs.sync_items.start(page_size=50, pause=0.2)
    worker = runjobs()

    def pages() -> int:
        return Chain.objects.get(pk=started.pk).pages_done

    for at_least in (3, 9):
        wait_for(lambda n=at_least: pages() >= n, timeout=60)
        worker.kill_tree()  # mid-page, most likely: each page sleeps 0.2 s after its writes
        worker = runjobs()
    wait_for(lambda: Chain.objects.get(pk=started.pk).status == Chain.Status.DONE, timeout=120)
    keys = list(SideEffect.objects.filter(key__startswith="item:").values_list("key", flat=True))
    assert len(keys) == 1000 == len(set(keys))
    assert Chain.objects.get(pk=started.pk).items_done == 1000
