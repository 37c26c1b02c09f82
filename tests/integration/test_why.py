"""Why isn't this job running? Each lifecycle state, and each place outside Redis a job can be, gives
one sentence naming what holds the job and what lifts it: the same from ``get_job(id).why``,
``django_jobs.why(id)``, the job page and ``manage.py jobs why``."""

from __future__ import annotations

import html
import io
import re
import time
from collections.abc import Callable

import pytest
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

import django_jobs
from django_jobs import get_job
from django_jobs.core import execution, registry
from django_jobs.exceptions import JobDoesNotExist, PermanentError, Snooze
from django_jobs.models import OutboxEntry
from django_jobs.store import Finished, Store, keys
from django_jobs.store.lifecycle import State
from django_jobs.testing import run_jobs
from tests.conftest import wait_for
from tests.integration.dashboard_support import operator
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True, databases=["default", "other"])

WORKER = "host.7"


def _claim(store: Store, lease: float = 30, paused: tuple[str, ...] = ()):
    claim = store.complete_and_claim(
        ["default"], finished=None, worker_name=WORKER, lease_seconds=lease, nonce=f"n{time.monotonic_ns()}",
        finished_ttl=60, limits=registry.limits_json(paused),
    )  # fmt: skip
    execution.publish_expired(store, claim.expired)
    return claim.claimed


def _waiting(store: Store) -> str:
    jobs.record.enqueue("first")
    return jobs.record.enqueue("second").id


def _priority(store: Store) -> str:
    return jobs.record.options(priority=5).enqueue("p").id


def _turn(store: Store) -> str:
    jobs.per_account.enqueue("A", "first")
    holder = _claim(store)
    second = jobs.per_account.enqueue("A", "second").id
    assert _claim(store) is None  # over its key's limit: into its key's line
    store.complete(Finished(holder.token, holder.queue, None, registry.limit_scope(holder.record)), 60)
    return second


def _held(store: Store) -> str:
    store.pause("queue", "default", by="ada", reason="maintenance window")
    return jobs.record.enqueue("held").id


def _parked(store: Store) -> str:
    store.pause("job", "tests.record", by="ada", reason="bad deploy")
    job_id = jobs.record.enqueue("parked").id
    assert _claim(store, paused=("tests.record",)) is None
    return job_id


def _in_line(store: Store) -> str:
    jobs.per_account.enqueue("A", "first")
    assert _claim(store) is not None
    job_id = jobs.per_account.enqueue("A", "second").id
    assert _claim(store) is None  # over its key's limit: into its key's line
    return job_id


def _scheduled(store: Store) -> str:
    return jobs.record.options(delay=600).enqueue("later").id


def _retrying(store: Store) -> str:
    job_id = jobs.always_fails.enqueue("r").id
    execution.settle_failure(store, _claim(store), ConnectionError("upstream down"))
    return job_id


def _snoozed(store: Store) -> str:
    job_id = jobs.snoozer.enqueue("s", 1).id
    execution.settle_snooze(store, _claim(store), Snooze(600), registry.get("tests.snoozer"), 0.0)
    return job_id


def _running(store: Store) -> str:
    job_id = jobs.record.enqueue("running").id
    _claim(store)
    return job_id


def _lost(store: Store) -> str:
    job_id = jobs.record.enqueue("lost").id
    _claim(store, lease=0.01)
    time.sleep(0.05)
    store.maintain(["default"], registry.limits_json())  # reaps the expired lease into the lost set
    return job_id


def _dying(store: Store) -> str:
    job_id = jobs.permanent.enqueue("dying").id
    execution.settle_failure(store, _claim(store), PermanentError("voided"))  # its dead letter not written
    return job_id


def _vanished(store: Store) -> str:
    job_id = jobs.record.enqueue("vanished").id
    store.connection.delete(keys.job_key(job_id))
    assert _claim(store) is None
    return job_id


def _ran(job: Callable[[str], object]) -> Callable[[Store], str]:
    def setup(store: Store) -> str:
        job_id = job("x").id  # type: ignore[attr-defined]
        run_jobs()
        return job_id

    return setup


def _cancelled(store: Store) -> str:
    handle = jobs.record.enqueue("c")
    handle.cancel()
    return handle.id


def _expired(store: Store) -> str:
    job_id = jobs.record.options(expires=0.01).enqueue("x").id
    time.sleep(0.05)
    assert _claim(store) is None
    return job_id


def _replaced(store: Store) -> str:
    first = jobs.record.options(unique_key="index:7", debounce=60).enqueue("a").id
    jobs.record.options(unique_key="index:7", debounce=60).enqueue("b")
    return first


def rq_failed(store: Store) -> str:
    """What an rqworker does to a django_jobs job it pops (tests/acceptance runs a real one)."""
    job_id = jobs.record.enqueue("taken").id
    connection = store.connection
    connection.lrem(keys.queue_key("default"), 0, job_id)
    connection.hset(keys.job_key(job_id), mapping={"status": "failed", "worker_name": "c43f4e"})
    connection.zadd(keys.failed_key("default"), {job_id: 1e10})
    return job_id


#: Per state: how to put a job in it, and what its sentence must say.
CASES: dict[State, tuple[Callable[[Store], str], list[str]]] = {
    State.WAITING: (
        _waiting,
        [
            "ready on queue `default`, 1 job ahead of it",
            "no runjobs serves queue `default`",
            "start `manage.py runjobs default`",
        ],
    ),
    State.WAITING_PRIORITY: (_priority, ["ready on queue `default`, next in line (priority 5)"]),
    State.TURN: (_turn, ["key `A` has a free slot: ready on queue `default`"]),
    State.HELD: (
        _held,
        ["queue `default` is paused by ada since", '(reason: "maintenance window"): resume it'],
    ),
    State.PARKED: (
        _parked,
        ["job type `tests.record` is paused by ada since", '(reason: "bad deploy"): resume it'],
    ),
    State.IN_LINE: (
        _in_line,
        [
            "parked behind key `A`'s limit of 1 at a time (job type `tests.per_account`), "
            "next in line: it runs when a slot of its key frees"
        ],
    ),
    State.SCHEDULED: (_scheduled, ["scheduled: due at", "(in 10 min)"]),
    State.RETRYING: (_retrying, ["attempt 2 of 3 due at", "), after ConnectionError: upstream down"]),
    State.SNOOZED: (_snoozed, ["snoozed (1 time): due at", "(in 10 min)"]),
    State.RUNNING: (_running, [f"running on `{WORKER}` since", "(attempt 1 of 3); its lease runs to"]),
    State.LOST: (_lost, [f"its worker `{WORKER}` stopped renewing its lease"]),
    State.DYING: (_dying, ["it failed for good: its dead letter is being written"]),
    State.VANISHED: (_vanished, ["its record was lost from Redis"]),
    State.FINISHED: (_ran(jobs.record.enqueue), ["finished at", "): it ran to success"]),
    State.DEAD: (
        _ran(jobs.permanent.enqueue),
        ["dead-lettered at", "after 1 attempt: requeue it from its dead letter"],
    ),
    State.CANCELLED: (_cancelled, ["cancelled at", ": it will not run again"]),
    State.EXPIRED: (_expired, ["expired at", "it had not started by its expiry, so it was dropped unrun"]),
    State.REPLACED: (_replaced, ["replaced by a newer enqueue of the same debounced job (job "]),
    State.FOREIGN: (
        rq_failed,
        ["a foreign worker (c43f4e, not runjobs) took it from queue `default` and failed"],
    ),
}


def test_every_state_has_a_case_here():
    assert set(CASES) == set(State)


def timeless(sentence: str) -> str:
    """A sentence without how far its moments are from now, which moves while a test reads it."""
    return re.sub(r" \((now|in [^)]*|[^)]* ago)\)", "", sentence)


@pytest.mark.parametrize("state", list(State), ids=lambda state: state.name)
def test_each_state_gives_its_sentence_from_code_the_command_line_and_the_job_page(state, redis_db, client):
    setup, says = CASES[state]
    job_id = setup(Store.of(redis_db))
    sentence = django_jobs.why(job_id)
    for part in says:
        assert part in sentence, sentence
    if state is not State.VANISHED:  # no hash: get_job knows nothing of it
        found = get_job(job_id)
        assert found.state is state and timeless(found.why) == timeless(sentence)
    out = io.StringIO()
    call_command("jobs", "why", job_id, stdout=out)
    assert timeless(out.getvalue()) == timeless(sentence) + "\n"  # read a moment later: "now" may pass
    operator(client, "view_deadletter", "view_deadletter_payload")
    page = client.get(reverse("admin:django_jobs_deadletter_job", args=[job_id])).content.decode()
    shown = re.search(r'<p id="job-why"><strong>Why:</strong> (.*?)</p>', page)
    assert shown is not None and html.unescape(shown[1]).split(" UTC")[0] == sentence.split(" UTC")[0]


def _kept_for(port: int) -> str:
    return (
        f"its Redis server redis://127.0.0.1:{port}/0 (queue `emails`) is unreachable: its outbox row "
        "keeps it, and runjobs pushes it once the server answers"
    )


def test_a_job_whose_redis_was_down_at_commit_waits_in_the_outbox_for_that_server(redis_db, emails_redis):
    emails_redis.stop()
    with transaction.atomic():
        job_id = jobs.record.options(queue="emails").enqueue("pending").id
    assert django_jobs.why(job_id) == _kept_for(emails_redis.port)


def test_a_dead_letter_kept_after_its_record_expired_still_says_so(redis_db):
    job_id = jobs.permanent.enqueue("gone").id
    run_jobs()
    redis_db.delete(keys.job_key(job_id))
    assert django_jobs.why(job_id).startswith("dead-lettered at ")
    assert "(permanent): requeue it from its dead letter" in django_jobs.why(job_id)


def test_a_ledger_job_redis_lost_is_pushed_again_by_the_sweep(redis_db):
    job_id = jobs.record.enqueue("lost").id
    redis_db.flushdb()
    assert django_jobs.why(job_id) == (
        "in the outbox for queue `default`, not in Redis: the transaction that enqueued it has not "
        "committed, or Redis was down; Redis may have lost it too: runjobs pushes it (again) within 10 s "
        "of Redis answering"
    )


def test_a_job_on_a_redis_server_that_does_not_answer_names_the_server(redis_db, emails_redis):
    job_id = jobs.record.options(queue="emails").enqueue("far").id
    emails_redis.stop()
    assert django_jobs.why(job_id, queue="emails") == _kept_for(emails_redis.port)  # its ledger row
    OutboxEntry.objects.filter(pk=job_id).delete()  # a job enqueued at the "fast" level keeps no row
    assert django_jobs.why(job_id) == (
        f"not found on the Redis servers that answer; unreachable: redis://127.0.0.1:{emails_redis.port}/0 "
        "(queues emails)"
    )


def test_an_unknown_id_is_a_clear_error(redis_db):
    with pytest.raises(JobDoesNotExist, match="No job nope is known"):
        django_jobs.why("nope")
    with pytest.raises(ValueError, match="is not a job id"):
        django_jobs.why("not an id")


def test_a_ready_job_with_a_runjobs_serving_its_queue_waits_its_turn(redis_db, runjobs):
    runjobs("default", "--concurrency", "1")
    wait_for(lambda: redis_db.scard(keys.WORKERS_SET))  # its work process registered
    busy = jobs.sleepy.enqueue("busy", 0.9)
    wait_for(lambda: get_job(busy.id).state is State.RUNNING)
    waiting = jobs.record.enqueue("next")
    sentence = django_jobs.why(waiting.id)
    assert sentence.endswith("next in line: a runjobs serving `default` takes it in turn"), sentence
    assert "running on `" in get_job(busy.id).why
