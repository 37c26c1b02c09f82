"""The pipe reports' cost per job: what a work process encodes for a plain job (its start, its
return, its completion) and what the supervisor spends reading them into its slot.

    .venv/bin/python -m benchmarks.reports
"""

from __future__ import annotations

import os
import time
import timeit

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
django.setup()  # the worker's modules read settings on import

from django_jobs.worker.process import _COMPLETING, _RETURNED  # noqa: E402
from django_jobs.worker.protocol import Started, encode  # noqa: E402
from django_jobs.worker.slot import Slot  # noqa: E402

TOKEN, QUEUE = "a1b2c3d4e5f6a1b2c3d4e5f6:9f8e7d6c5b4a0", "default"
RUNS = 200_000


def child() -> bytes:
    """A plain job's three reports, as the work process builds them."""
    started = encode(Started(TOKEN, QUEUE, time.monotonic() + 30, 123456789))
    return started + _RETURNED + _COMPLETING


def supervisor(slot: Slot, wire: bytes) -> None:
    """The supervisor reads the three (one read) into the slot."""
    slot.feed(wire)
    slot.started.clear()


def main() -> None:
    wire = child()
    slot = Slot(1, 0, "bench")
    for name, run in (("encode", child), ("decode", lambda: supervisor(slot, wire))):
        best = min(timeit.repeat(run, number=RUNS, repeat=5)) / RUNS
        print(f"{name}: {best * 1e9:.0f} ns per job")


if __name__ == "__main__":
    main()
