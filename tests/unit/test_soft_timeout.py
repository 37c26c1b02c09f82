"""The soft timeout's SIGALRM handler: a work process keeps it installed between jobs (and puts back
what a job replaced), in-process callers get theirs back after each attempt."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from django_jobs.core import execution
from django_jobs.core.execution import expire, soft_timeout
from django_jobs.exceptions import JobTimeout
from django_jobs.worker.process import WorkProcess


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _overrun(seconds: float) -> None:
    with soft_timeout(seconds):
        time.sleep(seconds * 20)


def test_an_attempt_in_process_puts_back_the_handler_it_found():
    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not ours to call")

    signal.signal(signal.SIGALRM, mine)
    with pytest.raises(JobTimeout, match=r"timeout of 0\.05 s"):
        _overrun(0.05)
    assert signal.getsignal(signal.SIGALRM) is mine


def test_an_attempt_in_process_puts_back_the_alarm_it_found():
    """A test's own alarm (pytest-timeout's, say) still fires after an immediate-mode job ran."""
    fired: list[int] = []
    signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with soft_timeout(5):
            time.sleep(0.05)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 0.1 < left <= 0.25
        time.sleep(0.4)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_a_work_process_keeps_its_handlers_and_takes_back_those_a_job_replaced():
    work = WorkProcess([], "w", report_fd=-1)
    work.install_signals()
    with pytest.raises(JobTimeout, match=r"timeout of 0\.05 s"):
        _overrun(0.05)
    assert signal.getsignal(signal.SIGALRM) is expire  # left installed for the next attempt

    for signum in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):  # what a job may do
        signal.signal(signum, signal.SIG_DFL)
    work.install_signals()
    with pytest.raises(JobTimeout, match=r"timeout of 0\.1 s"):
        _overrun(0.1)
    os.kill(os.getpid(), signal.SIGTERM)  # asks the loop to stop, and nothing more
    assert work.stopping
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_work_process_sets_no_handler_that_is_already_in_place(monkeypatch):
    work = WorkProcess([], "w", report_fd=-1)
    work.install_signals()

    def unexpected(*args: object) -> None:
        raise AssertionError("a handler in place is not set again")

    monkeypatch.setattr(signal, "signal", unexpected)
    work.install_signals()  # SIG_IGN read raw is its number: still the handler wanted
    monkeypatch.undo()


def test_a_process_that_keeps_the_handler_swaps_none_and_its_timeouts_still_fire(monkeypatch):
    monkeypatch.setattr(execution._Alarm, "kept", False)
    WorkProcess([], "w", report_fd=-1).install_signals()
    execution.keep_alarm()

    def unexpected(*args: object) -> None:
        raise AssertionError("a kept handler is neither read nor set")

    monkeypatch.setattr(signal, "getsignal", unexpected)
    monkeypatch.setattr(signal, "signal", unexpected)
    with pytest.raises(JobTimeout, match=r"timeout of 0\.05 s"):
        _overrun(0.05)
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGALRM) is expire


def test_a_process_forked_from_a_keeper_keeps_nothing(monkeypatch):
    """A job that forks (or the supervisor's next work process before it says so) must put back the
    handler it found: its own handler is not ours to assume."""
    monkeypatch.setattr(execution._Alarm, "kept", False)
    execution.keep_alarm()
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        os._exit(0 if not execution._Alarm.kept else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert execution._Alarm.kept  # the parent still keeps it
