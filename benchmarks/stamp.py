"""The bodies of the jobs every runner of the I/O and peer runs executes, with no dependency: each
appends ``<n> <start> <end>`` to a file (one ``O_APPEND`` write, so concurrent jobs don't mix).

django_jobs (``benchmarks/benchapp/jobs.py``), Celery, Dramatiq and Django Tasks
(``benchmarks/peerside``) each wrap the same bodies, so every runner runs the same job: the harness
counts the lines (every job ran exactly once) and takes first start -> last end from them.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

WAIT_SECONDS = 0.05


def _append(n: int, path: str, started: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{n} {started:.6f} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def noop(n: int, path: str) -> None:
    """Nothing but the stamp."""
    _append(n, path, time.time())


def wait(n: int, path: str) -> None:
    """Waits 50 ms (``time.sleep``: under gevent, its monkey-patched one), then stamps."""
    started = time.time()
    time.sleep(WAIT_SECONDS)
    _append(n, path, started)


async def wait_async(n: int, path: str) -> None:
    """Waits 50 ms without blocking its event loop, then stamps."""
    started = time.time()
    await asyncio.sleep(WAIT_SECONDS)
    _append(n, path, started)


@dataclass(frozen=True)
class Stamps:
    """What a stamp file says: how many lines, how many distinct jobs, first start -> last end."""

    lines: int
    distinct: int
    span: float


def count(path: Path) -> int:
    """Lines written so far (cheap enough to poll)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def read(path: Path) -> Stamps:
    rows = [line.split() for line in path.read_text().splitlines()]
    starts, ends = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    span = max(ends) - min(starts) if rows else 0.0
    return Stamps(len(rows), len({r[0] for r in rows}), span)
