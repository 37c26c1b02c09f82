"""Fuzz: garbage planted in every Redis structure and outbox row the worker reads, while valid
jobs run on two ``runjobs``.

Each Hypothesis example plants a handful of bad items (ids that are not UTF-8, ids whose hash is
gone, ids whose key is not a hash, job hashes with one garbage field, expired leases of nobody,
outbox rows that name no queue, a queue or lease key of the wrong type...) and enqueues valid jobs
beside them. Every valid job must run exactly once, every planted item must leave the structure
it was planted in (quarantined as a dead letter, or run at most once), and both ``runjobs`` must
stay up.

Small in CI; ``JOBS_FUZZ_EXAMPLES`` (examples, default 8) and ``JOBS_FUZZ_RANDOM=1`` (a new seed
each run instead of the fixed one) make it a long, wide run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import redis
from django.utils import timezone
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from django_jobs.client.enqueue import build
from django_jobs.models import DeadLetter, OutboxEntry
from django_jobs.store import surrogate_id, valid_job_id
from django_jobs.store.keys import STANDALONE
from django_jobs.worker.structure import expected_types
from tests.conftest import wait_for
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

EXAMPLES = int(os.environ.get("JOBS_FUZZ_EXAMPLES", "8"))
RANDOM = os.environ.get("JOBS_FUZZ_RANDOM") == "1"
VALID_PER_ROUND = 5
#: Dying entries are only finished once older than three leases; leave room for that and a retry.
SETTLE_SECONDS = 60

#: Bytes that broke, or could break, a decoder, a Lua pattern, a text column or a key name.
NASTY = [
    b"",
    b"\x00",
    b"\xff\xfe\xfd",
    b"\xed\xa0\x80",  # a lone surrogate, as CESU/WTF-8 writes it
    b":",
    b"a:b:c",
    b"x" * 5000,
    b"\n\r\t",
    b"%s%d{}",
    "ünïcødé".encode(),
    b"null",
    b"[]",
    b'{"a": 1}',
    b"1e999",
    b"-1",
    zlib.compress(b"[" * 3_000_000),  # a small field that inflates to megabytes
]
garbage = st.one_of(
    st.sampled_from(NASTY),
    st.binary(max_size=30),
    st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
)
#: Fields of a job hash the worker and maintenance read.
FIELDS = ["data", "description", "origin", "dj_attempt", "dj_cron", "dj_history", "enqueued_at", "timeout",
          "status", "created_at", "dj_expires", "dj_snoozes"]  # fmt: skip


@dataclass
class Planted:
    """One bad item and how to tell that the system is done with it."""

    what: str
    gone: Callable[[], bool]
    #: job id (text) of a job that may run at most once, or must become a dead letter, not both
    job_id: str | None = None
    side_effect: str | None = None


@dataclass
class Round:
    client: redis.Redis
    number: int
    planted: list[Planted] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def unique(self, raw: bytes) -> bytes:
        """Planted ids stay distinct across items and rounds, whatever the garbage."""
        return f"fz{self.number}-{next(self.counter)}-".encode() + raw

    def zset(self, key: str, member: bytes, score: float) -> None:
        self.client.zadd(key, {member: score})
        self.planted.append(Planted(f"{key} {member!r}", lambda: self.client.zscore(key, member) is None))

    def queue_entry(self, raw: bytes) -> None:
        member = self.unique(raw)
        self.client.rpush("rq:queue:default", member)
        self.planted.append(
            Planted(f"queue {member!r}", lambda: member not in self.client.lrange("rq:queue:default", 0, -1))
        )

    def wrong_type(self, raw: bytes) -> None:
        """An id in the queue whose key is a string, not a job hash."""
        member = self.unique(raw)
        self.client.set(b"rq:job:" + member, raw)
        self.queue_entry_of(member)

    def wrong_type_key(self, key: str, raw: bytes) -> None:
        """A structure key (a queue, the lease set...) holding a string: only where none exists yet,
        so the plant adds garbage beside the valid jobs' data instead of destroying it."""
        if not self.client.set(key, raw, nx=True):
            return
        want = expected_types(STANDALONE, ["default", "emails"])[key]
        self.planted.append(
            Planted(f"{key} as a string", lambda: self.client.type(key).decode() in (want, "none"))
        )

    def queue_entry_of(self, member: bytes) -> None:
        self.client.rpush("rq:queue:default", member)
        self.planted.append(
            Planted(f"queue {member!r}", lambda: member not in self.client.lrange("rq:queue:default", 0, -1))
        )

    def bad_field(self, name: str, value: bytes) -> None:
        """A valid job with one garbage field: it runs at most once or becomes a dead letter."""
        key = f"fuzz-field-{self.number}-{next(self.counter)}"
        envelope = build("tests.record", "default", 10, [key], {})
        self.client.hset(f"rq:job:{envelope.id}", mapping={**envelope.fields(), name: value})
        self.client.rpush("rq:queue:default", envelope.id)
        self.planted.append(
            Planted(
                f"job with {name}={value[:40]!r}",
                lambda: envelope.id.encode() not in self.client.lrange("rq:queue:default", 0, -1),
                job_id=envelope.id,
                side_effect=key,
            )
        )

    def job_under_id(self, raw: bytes) -> None:
        """A valid job hash under a garbage id: it runs once if the id is a valid one, else it is
        quarantined under the id's surrogate; never both, never twice."""
        member = self.unique(raw)
        key = f"fuzz-id-{self.number}-{next(self.counter)}"
        envelope = build("tests.record", "default", 10, [key], {})
        self.client.hset(b"rq:job:" + member, mapping=envelope.fields())
        self.client.rpush("rq:queue:default", member)
        text = member.decode("utf-8", "surrogateescape")
        self.planted.append(
            Planted(
                f"job under id {member!r}",
                lambda: member not in self.client.lrange("rq:queue:default", 0, -1),
                job_id=text if valid_job_id(text) else surrogate_id(member),
                side_effect=key,
            )
        )

    def outbox_row(self, queue: str, data: str, options: dict[str, object]) -> None:
        ident = f"fz{self.number}x{next(self.counter)}"
        OutboxEntry.objects.create(
            id=ident, job_name="tests.record", queue=queue, data=data, timeout=10, due=0,
            options=options, created_at=timezone.now() - dt.timedelta(seconds=5),
        )  # fmt: skip
        self.planted.append(
            Planted(f"outbox row queue={queue!r} data={data[:40]!r} options={options!r}",
                    lambda: not OutboxEntry.objects.filter(id=ident).exists())
        )  # fmt: skip


def _printable(raw: bytes) -> str:
    """Garbage that a text column can hold (outbox rows come from our own code and the database)."""
    return raw.decode("utf-8", "replace").replace("\x00", "")


STRUCTURES = sorted(expected_types(STANDALONE, ["default", "emails"]))

plant = st.one_of(
    st.builds(lambda key, raw: ("wrong_type_key", (key, raw)), st.sampled_from(STRUCTURES), garbage),
    st.builds(lambda raw: ("queue_entry", raw), garbage),
    st.builds(lambda raw: ("wrong_type", raw), garbage),
    st.builds(lambda raw: ("job_under_id", raw), garbage),
    st.builds(lambda raw: ("lease", raw), garbage),
    st.builds(lambda raw: ("lost", raw), garbage),
    st.builds(lambda raw: ("dying", raw), garbage),
    st.builds(lambda raw: ("scheduled", raw), garbage),
    st.builds(lambda name, raw: ("field", (name, raw)), st.sampled_from(FIELDS), garbage),
    st.builds(lambda raw: ("outbox_queue", raw), garbage),
    st.builds(lambda raw: ("outbox_data", raw), garbage),
    st.builds(lambda key, raw: ("outbox_options", (key, raw)),
              st.sampled_from(["debounce", "cron_run", "unique_key", "surprise"]), garbage),
)  # fmt: skip


def _plant(round_: Round, kind: str, value: object) -> None:
    ancient = 1.0  # a score long in the past: expired, due, old enough to finish
    if kind == "queue_entry":
        round_.queue_entry(value)  # type: ignore[arg-type]
    elif kind == "wrong_type":
        round_.wrong_type(value)  # type: ignore[arg-type]
    elif kind in ("lease", "lost", "dying"):
        round_.zset(f"djjobs:{'leases' if kind == 'lease' else kind}", round_.unique(value), ancient)  # type: ignore[arg-type]
    elif kind == "scheduled":
        round_.zset("rq:scheduled:default", round_.unique(value), ancient)  # type: ignore[arg-type]
    elif kind == "job_under_id":
        round_.job_under_id(value)  # type: ignore[arg-type]
    elif kind == "wrong_type_key":
        round_.wrong_type_key(*value)  # type: ignore[misc]
    elif kind == "field":
        round_.bad_field(*value)  # type: ignore[misc]
    elif kind == "outbox_queue":
        valid = build("tests.record", "default", 10, ["outbox-bad-queue"], {}).data
        round_.outbox_row(_printable(value)[:100] or "nowhere", valid, {})  # type: ignore[arg-type]
    elif kind == "outbox_data":
        round_.outbox_row("default", _printable(value), {})  # type: ignore[arg-type]
    else:
        key, raw = value  # type: ignore[misc]
        valid = build("tests.record", "default", 10, ["outbox-bad-options"], {}).data
        round_.outbox_row("default", valid, {key: _printable(raw)})


def _dead_or_expired(client: redis.Redis, job_id: str) -> bool:
    expired = client.hexists(f"rq:job:{job_id}", "dj_expired")
    return bool(expired) or DeadLetter.objects.filter(job_id=job_id).exists()


def _check(round_: Round, valid_keys: list[str], workers: list) -> None:
    wait_for(lambda: SideEffect.objects.filter(key__in=valid_keys).count() >= len(valid_keys), timeout=60)
    for item in round_.planted:
        try:
            wait_for(item.gone, timeout=SETTLE_SECONDS, interval=0.2)
        except AssertionError:
            raise AssertionError(f"planted item never handled: {item.what}") from None
    counts = {key: SideEffect.objects.filter(key=key).count() for key in valid_keys}
    assert set(counts.values()) == {1}, f"valid jobs not run exactly once: {counts}"
    for item in round_.planted:
        if item.job_id is None:
            continue
        ran = SideEffect.objects.filter(key=item.side_effect).count()
        dead = DeadLetter.objects.filter(job_id=item.job_id).exists()
        assert ran <= 1, f"{item.what} ran {ran} times"
        # It either ran, or it is (or will shortly be) a dead letter an operator sees, or its dj_expires
        # read as a time already past and the claim dropped it as expired, on the record: never nothing.
        if not ran:
            wait_for(lambda item=item: _dead_or_expired(round_.client, item.job_id), timeout=30)
        else:
            assert not dead, f"{item.what} ran and was dead-lettered too"
    for worker in workers:
        assert worker.proc.poll() is None, f"runjobs exited:\n{worker.output()[-5000:]}"


def test_garbage_in_redis_never_stops_valid_jobs(runjobs, redis_db):
    workers = [runjobs("--concurrency", "1"), runjobs("--concurrency", "1")]
    rounds = itertools.count()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=not RANDOM,
        phases=[Phase.explicit, Phase.generate],  # shrinking would rerun minute-long rounds
        suppress_health_check=list(HealthCheck),
    )
    @given(plants=st.lists(plant, min_size=1, max_size=6))
    def one_round(plants: list[tuple[str, object]]) -> None:
        round_ = Round(redis_db, next(rounds))
        for kind, value in plants:
            with contextlib.suppress(redis.ResponseError):  # an earlier plant broke the key this one uses
                _plant(round_, kind, value)
        keys = [f"fuzz-valid-{round_.number}-{i}" for i in range(VALID_PER_ROUND)]
        from tests.testapp import jobs

        jobs.record.enqueue_many([(key,) for key in keys])
        _check(round_, keys, workers)

    one_round()
