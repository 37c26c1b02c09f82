"""What a pause looks like without a server: the claim's limits argument for paused job types, a
pause record read tolerantly, and the gauges built from pauses."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest

from django_jobs.core import registry
from django_jobs.store import Pause
from django_jobs.telemetry import metrics
from tests.observability.conftest import samples


def test_a_paused_type_travels_with_the_limits_under_its_name_and_every_alias():
    limits = json.loads(registry.limits_json(["tests.new_name", "tests.solo"]))
    assert limits["tests.new_name"] == limits["tests.old_name"] == [0, 0, 1, "tests.new_name", False, True]
    # a limited type keeps its limits; the pause is the sixth item (the fifth: whether it has limit_key)
    assert limits["tests.solo"] == limits["tests.solo_before_rename"] == [1, 0, 1, "tests.solo", False, True]
    assert limits["tests.limited"] == [3, 0, 1, "tests.limited"]  # not paused: as before


def test_nothing_paused_is_the_same_argument_as_without_pausing():
    assert registry.limits_json([]) == registry.limits_json()
    assert not any(limit[5:] for limit in json.loads(registry.limits_json()).values())  # no pause item


def test_a_paused_name_this_process_does_not_know_is_held_all_the_same():
    assert json.loads(registry.limits_json(["billing.elsewhere"]))["billing.elsewhere"] == [
        0, 0, 1, "billing.elsewhere", False, True,
    ]  # fmt: skip


def test_a_pause_record_is_read_tolerantly():
    good = Pause.parse(b"queue:emails", b'{"at": 1700000000.5, "by": "ops", "reason": "deploy"}')
    assert good == Pause("queue", "emails", 1700000000.5, "ops", "deploy")
    assert good.seconds(1700000010.5) == 10.0 and good.since is not None
    for garbage in (b"\xff", b"[]", b'{"at": "soon"}', b'{"at": NaN}', b"{}"):
        read = Pause.parse(b"job:billing.send", garbage)
        assert read is not None and (read.kind, read.name) == ("job", "billing.send"), garbage
        assert read.since is None and read.seconds(1e9) == 0.0
    for field in (b"host:web-1", b"queue:", b"emails", b"\xff:x"):
        assert Pause.parse(field, b"{}") is None, field


def test_the_gauges_give_each_queue_its_age_and_only_paused_types_a_series():
    pauses = [Pause("queue", "emails", 1000.0, "", ""), Pause("job", "billing.send", 1500.0, "", "")]

    class Gauges:
        def collect(self):
            return metrics.pause_families(["default", "emails"], pauses, now=2000.0)

    collected = CollectorRegistry()
    collected.register(Gauges())
    found = samples(generate_latest(collected).decode())
    assert found == {
        ("django_jobs_queue_paused_seconds", frozenset({("queue", "default")})): 0.0,
        ("django_jobs_queue_paused_seconds", frozenset({("queue", "emails")})): 1000.0,
        ("django_jobs_job_paused_seconds", frozenset({("job", "billing.send")})): 500.0,
    }
