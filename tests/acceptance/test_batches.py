"""A batch through real runjobs while a chaos loop SIGKILLs work processes and whole runjobs trees:
its members are killed, retried, dead-lettered and requeued, and its callbacks run exactly once.

Small in CI; ``JOBS_BATCH_MEMBERS`` and ``JOBS_BATCH_CHAOS_SECONDS`` make it bigger.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import time

import pytest
import redis

from django_jobs.failures import deadletter
from django_jobs.models import Batch, BatchCallback, BatchMember, DeadLetter
from django_jobs.workflows.batches import batch
from tests.acceptance.test_soak import _work_process_pids
from tests.conftest import ROOT, wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

MEMBERS = int(os.environ.get("JOBS_BATCH_MEMBERS", "40"))
CHAOS_SECONDS = float(os.environ.get("JOBS_BATCH_CHAOS_SECONDS", "6"))


def _enqueue_members(tmp_path) -> Batch:
    """The soak's slow idempotent jobs, plus one of each fate: retried, self-killing, dead-lettered,
    and a gate that holds the batch open until the test opens it."""
    rng = random.Random(11)
    callbacks = {
        "on_success": jobs.batch_done.bind("cb-success"),
        "on_complete": jobs.batch_done.bind("cb-complete"),
    }
    with batch(**callbacks, name="chaos") as created:
        jobs.needs_fix.enqueue("charge")
        jobs.gate.enqueue("gate", str(tmp_path / "open"))
        # one failure of its three attempts: a kill of the chaos may take another and it still succeeds
        jobs.fails_then_succeeds.enqueue("flaky", failures=1)
        jobs.kill_once.enqueue("suicide", str(tmp_path / "killed"))
        jobs.soak.enqueue_many([(f"m{i}", rng.uniform(0.1, 0.4)) for i in range(MEMBERS)])
    return created


def quiet(client: redis.Redis) -> bool:
    """Nothing queued, scheduled, running or lost: every delivery of every job has ended."""
    return not (
        client.zcard("djjobs:leases")
        or client.llen("rq:queue:default")
        or client.zcard("rq:scheduled:default")
        or client.zcard("djjobs:lost")
    )


class Chaos:
    """Every 0.5-1.5 s, SIGKILL a whole runjobs tree (and start another), then one work process, in turn."""

    def __init__(self, start, client: redis.Redis) -> None:
        self.start, self.client = start, client
        self.rng = random.Random(5)
        self.workers = [start() for _ in range(2)]
        self.started = list(self.workers)  # every runjobs, killed ones included, for the report
        self.kills = {"runjobs tree": 0, "work process": 0}
        self.next = time.monotonic() + self.rng.uniform(0.5, 1.5)

    def tick(self) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + self.rng.uniform(0.5, 1.5)
        if self.kills["runjobs tree"] <= self.kills["work process"]:
            index = self.rng.randrange(len(self.workers))
            self.workers[index].kill_tree()
            self.workers[index] = self.start()
            self.started.append(self.workers[index])
            self.kills["runjobs tree"] += 1
        elif pids := _work_process_pids(self.client):
            os.kill(self.rng.choice(pids), signal.SIGKILL)
            self.kills["work process"] += 1


def test_callbacks_run_once_through_kills_retries_and_a_requeued_dead_letter(
    private_redis, runjobs, tmp_path
):
    env = {"JOBS_TEST_REDIS_URL": private_redis.url, "JOBS_TEST_BATCH_SWEEP": "1"}
    created = _enqueue_members(tmp_path)
    client = redis.Redis.from_url(private_redis.url)
    chaos = Chaos(lambda: runjobs("--concurrency", "2", extra_env=env), client)
    until = time.monotonic() + CHAOS_SECONDS
    requeued = False
    while time.monotonic() < until or not requeued:  # kills go on until the requeue at least
        chaos.tick()
        dead = DeadLetter.objects.filter(job_name="tests.needs_fix", status=DeadLetter.Status.OPEN).first()
        if dead is not None and not requeued:
            assert Batch.objects.get(pk=created.pk).status == Batch.Status.OPEN  # the gate holds it
            SideEffect.objects.create(key="fixed:charge")  # the operator fixes the data, then requeues
            requeued = len(deadletter.requeue([dead])) == 1
            (tmp_path / "open").touch()
        assert time.monotonic() < until + 60, "the member was never dead-lettered"
        time.sleep(0.05)

    ran = {BatchCallback.State.RAN.value}
    callbacks = BatchCallback.objects.filter(batch=created)
    try:
        wait_for(lambda: set(callbacks.values_list("state", flat=True)) == ran, timeout=90 + MEMBERS * 0.2)
    except AssertionError:
        pending = list(BatchMember.objects.exclude(state="succeeded").values_list("job_id", "state"))
        states = {job_id: chaos.client.hgetall(f"rq:job:{job_id}") for job_id, _ in pending}
        dead = list(DeadLetter.objects.values_list("job_id", "status"))
        raise AssertionError(
            f"callbacks {list(callbacks.values_list('kind', 'state', 'job_id'))}; members not succeeded "
            f"{pending}; their jobs {states}; dead letters {dead}"
        ) from None
    total = MEMBERS + 4
    done = Batch.objects.get(pk=created.pk)
    assert (done.status, done.total, done.succeeded, done.ended) == ("succeeded", total, total, 0)
    assert set(BatchMember.objects.values_list("state", flat=True)) == {"succeeded"}
    keys = [f"m{i}" for i in range(MEMBERS)] + ["flaky", "suicide", "charge", "gate"]
    assert sorted(SideEffect.objects.filter(key__in=keys).values_list("key", flat=True)) == sorted(keys)
    wait_for(lambda: quiet(chaos.client), timeout=60)  # every delivery has ended, duplicates included
    assert sorted(SideEffect.objects.filter(key__startswith="cb-").values_list("key", flat=True)) == [
        f"cb-complete|{created.pk}|succeeded|{total}|0",
        f"cb-success|{created.pk}|succeeded|{total}|0",
    ]
    assert all(chaos.kills.values()), chaos.kills
    report(chaos, total)


def report(chaos: Chaos, total: int) -> None:
    """The run's figures in var/batch-chaos-report.json; with JOBS_TEST_LOG=INFO, how many member ends
    no event reported (a worker killed at the wrong instant, the requeued member) the sweep counted."""
    logs = "".join(process.output() for process in chaos.started)
    swept = [int(n) for n in re.findall(r"Batch sweep: (\d+) member", logs)]
    figures = {"members": total, "chaos_seconds": CHAOS_SECONDS, "kills": chaos.kills,
               "runjobs_started": len(chaos.started), "swept_members": sum(swept)}  # fmt: skip
    (ROOT / "var" / "batch-chaos-report.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))
