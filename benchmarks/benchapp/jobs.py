"""The jobs the benchmarks run: no-ops, an idempotent database write, and a latency probe."""

from __future__ import annotations

import os
import time

from django_jobs import idempotent, job

from .. import stamp
from .models import Write


@job(name="bench.noop", timeout=30)
def noop(n: int) -> None:
    """Does nothing: measures the worker's own cost per job."""


def rq_noop(n: int) -> None:
    """The same no-op as a plain function, for RQ's workers."""


@job(name="bench.noop_result", timeout=30, store_result=True)
def noop_result(n: int) -> dict[str, int]:
    """Does nothing but return a small result: measures what keeping results costs."""
    return {"n": n}


@job(name="bench.write_once", timeout=30)
def write_once(key: str, n: int) -> None:
    """One real database write, done at most once per key."""
    with idempotent(f"write_once:{key}") as first:
        if first:
            Write.objects.create(n=n)


@job(name="bench.probe", timeout=30)
def probe(n: int, path: str) -> None:
    """Append ``<n> <start time>`` to ``path`` (one O_APPEND write, so concurrent probes don't mix)."""
    started = time.time()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {started:.6f}\n".encode())
    finally:
        os.close(fd)


@job(name="bench.verify_subject", timeout=30)
def verify_subject(key: str) -> None:
    """What the verifiers' cost is measured on: 50 statements, 48 reads and a guarded write."""
    for n in range(48):
        Write.objects.filter(n=n).exists()
    write_once(key, 1)


# The I/O and peer runs: every runner (django_jobs here, the peers in benchmarks/peerside) wraps the
# same bodies, which stamp a file the harness counts.


@job(name="bench.stamp", timeout=30)
def stamp_noop(n: int, path: str) -> None:
    """A no-op that stamps its start and end (the peers' no-op drain)."""
    stamp.noop(n, path)


@job(name="bench.wait", timeout=30)
def wait(n: int, path: str) -> None:
    """Waits 50 ms with ``time.sleep``, then stamps."""
    stamp.wait(n, path)


@job(name="bench.wait_async", timeout=30)
async def wait_async(n: int, path: str) -> None:
    """Waits 50 ms with ``asyncio.sleep``, then stamps."""
    await stamp.wait_async(n, path)
