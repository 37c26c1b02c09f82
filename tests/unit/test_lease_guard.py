"""The lease guard kills an attempt a share of the lease after its claim or last renewal was sent,
on its own: no supervisor loop, no Redis. Real processes, real signals."""

from __future__ import annotations

import subprocess
import time

import pytest

from django_jobs.worker.guard import ClaimBoard, LeaseGuard
from tests.conftest import wait_for

LEASE = 2.0  # the guard kills after 80% of it: 1.6 s


@pytest.fixture
def guarded():
    guard = LeaseGuard(LEASE)
    guard.start()
    processes = []

    def spawn() -> tuple[subprocess.Popen[bytes], ClaimBoard]:
        process = subprocess.Popen(["sleep", "60"])
        processes.append(process)
        board = ClaimBoard()
        guard.add(process.pid, board)
        return process, board

    yield guard, spawn
    guard.stop()
    for process in processes:
        process.kill()
        process.wait()


def ago(seconds: float) -> int:
    return time.monotonic_ns() - int(seconds * 1e9)


def test_an_attempt_claimed_most_of_a_lease_ago_is_killed_by_the_guard_alone(guarded):
    guard, spawn = guarded
    process, board = spawn()
    board.post(ago(1.0))
    wait_for(lambda: process.poll() is not None, timeout=5)
    (killed,) = guard.killed()
    assert killed.pid == process.pid and 1.6 <= killed.silent_for < 2.5
    assert process.returncode == -9


def test_a_renewal_of_the_same_attempt_postpones_the_kill_and_an_idle_process_is_never_killed(guarded):
    guard, spawn = guarded
    (renewed, renewed_board), (other, other_board), (idle, idle_board) = spawn(), spawn(), spawn()
    claimed = ago(1.5)
    renewed_board.post(claimed)
    guard.renewed(renewed.pid, claimed, ago(0))
    other_board.post(claimed)
    guard.renewed(other.pid, ago(9), ago(0))  # renews an earlier attempt of that process: no effect
    idle_board.post(0)
    wait_for(lambda: other.poll() is not None, timeout=5)
    assert renewed.poll() is None
    wait_for(lambda: renewed.poll() is not None, timeout=5)  # 1.6 s after the renewal
    assert idle.poll() is None
    assert [k.pid for k in guard.killed()] == [other.pid, renewed.pid]


def test_a_torn_or_stale_board_is_not_trusted():
    board = ClaimBoard()
    assert board.read() == 0
    board.post(12345)
    assert board.read() == 12345
    board._memory[8:16] = (1).to_bytes(8, "little")  # the second copy not written yet
    assert board.read() is None
