"""What the dashboard derives from a failure when it is recorded, so its queries stay plain lookups.

The fingerprint says which dead letters are "the same failure": the job name, the exception class
and the frame that raised it. The frame is ``file in function`` without the line number and without
the install prefix, so an unrelated edit above the raising line, or a deploy to a new release
directory, does not split a group in two.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass
from typing import Any

# The frame lines of Python's traceback format: '  File "/srv/app/shop/jobs.py", line 12, in charge'
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<function>.+?)\s*$', re.MULTILINE)
_PACKAGES = re.compile(r"^.*/(?:site|dist)-packages/")


@dataclass(frozen=True)
class Triage:
    raised_at: str
    fingerprint: str
    first_failed_at: dt.datetime | None


def _short_path(path: str) -> str:
    """Installed packages keep their import path; project files their last two components."""
    path = path.replace("\\", "/")
    trimmed = _PACKAGES.sub("", path)
    return trimmed if trimmed != path else "/".join(path.split("/")[-2:])


def raising_frame(traceback: str) -> str:
    """The innermost frame of the last exception in ``traceback`` ('' when it has no frames).

    With chained exceptions the last block is the one that ended the job, and its last frame is
    the one that raised.
    """
    frames = list(_FRAME.finditer(traceback))
    if not frames:
        return ""
    last = frames[-1]
    return f"{_short_path(last['path'])} in {last['function']}"[:300]


def fingerprint(job_name: str, exception: str, frame: str) -> str:
    """The stored group key; rows written since migration 0002 hold it, so it must never change."""
    return hashlib.sha256(f"{job_name}\n{exception}\n{frame}".encode()).hexdigest()[:16]


def failure_fingerprint(job_name: str, exception: str, traceback: str) -> str:
    """The one fingerprint of a failure: what the dashboard groups by and what alerts rate-limit by."""
    return fingerprint(job_name, exception, raising_frame(traceback))


def first_failure(history: Any) -> dt.datetime | None:
    """When the first recorded attempt failed, from the attempt history; None if it says nothing."""
    try:
        when = dt.datetime.fromisoformat(history[0]["at"])
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def triage(job_name: str, exception: str, traceback: str, history: Any) -> Triage:
    return Triage(
        raising_frame(traceback), failure_fingerprint(job_name, exception, traceback), first_failure(history)
    )
