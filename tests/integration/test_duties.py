"""Each maintenance duty is a module that runs alone from a ``Scope``, and ``Maintenance`` only
schedules them: each at its own interval, one raising never stopping the others."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import DYING, LEASES, Store
from django_jobs.worker.duties.base import Duty, Scope
from django_jobs.worker.duties.dying import Dying
from django_jobs.worker.duties.reaper import Reaper
from django_jobs.worker.duties.relay import Relay
from django_jobs.worker.duties.structures import Structures
from django_jobs.worker.maintenance import Maintenance
from tests.integration.test_maintenance_progress import dying_job, lose_a_running_job, outbox_row

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])  # the relay visits both


@pytest.fixture
def scope(redis_db):
    return Scope(Store(redis_db), ["default"], 0.1)


def test_the_reaper_alone_puts_a_lost_job_back(redis_db, scope):
    handle = lose_a_running_job(redis_db)
    Reaper(scope).run()
    assert redis_db.lrange("rq:queue:default", 0, -1) == [handle.id.encode()]
    assert not redis_db.zcard(LEASES)


def test_the_dying_duty_alone_writes_the_dead_letter(redis_db, scope):
    dying_job(redis_db, "late")
    Dying(scope).run()
    assert DeadLetter.objects.get(job_id="late").reason == DeadLetter.Reason.PERMANENT
    assert not redis_db.zcard(DYING)


def test_the_structure_check_alone_moves_a_broken_queue_aside(redis_db, scope):
    redis_db.set("rq:queue:default", "not a list")
    Structures(scope).run()
    assert not redis_db.exists("rq:queue:default")
    assert list(redis_db.scan_iter(match="djjobs:quarantine:*"))


@pytest.mark.usefixtures("fast")
def test_the_relay_alone_pushes_a_row_its_commit_missed(redis_db, scope):
    outbox_row("default", "missed")
    Relay(scope).run()
    assert redis_db.lrange("rq:queue:default", 0, -1) == [b"defaultmissed"]
    assert not OutboxEntry.objects.exists()


class Record(Duty):
    """A duty that notes each run, or raises ``error``."""

    name = "record"
    every = 60.0

    def __init__(self, scope: Scope, error: Exception | None = None) -> None:
        super().__init__(scope)
        self.runs, self.error = 0, error

    def run(self) -> None:
        self.runs += 1
        if self.error is not None:
            raise self.error


def scheduled(redis_db, *duties: Duty) -> Maintenance:
    maintenance = Maintenance(Store(redis_db), ["default"], 0.1)
    maintenance.duties, maintenance.due = list(duties), [0.0] * len(duties)
    return maintenance


def test_a_duty_that_raises_never_stops_the_next_and_each_keeps_its_interval(redis_db, scope, caplog):
    broken, after = Record(scope, ValueError("broken duty")), Record(scope)
    maintenance = scheduled(redis_db, broken, after)
    with caplog.at_level(logging.ERROR, logger="django_jobs.worker"):
        maintenance.tick()
        maintenance.tick()  # neither is due again within its minute
    assert (broken.runs, after.runs) == (1, 1)
    assert "record failed" in caplog.text


def test_a_redis_that_does_not_answer_ends_the_pass_for_the_caller_to_set_aside(redis_db, scope):
    unreachable, after = Record(scope, RedisConnectionError("refused")), Record(scope)
    maintenance = scheduled(redis_db, unreachable, after)
    with pytest.raises(RedisConnectionError):
        maintenance.tick()
    assert after.runs == 0
    assert not maintenance.ledger.reachable  # once it answers, the ledger sweeps
