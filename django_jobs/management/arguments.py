"""Argument types for the app's commands: a bad value is one argparse error line, never a traceback.

argparse reports an ``ArgumentTypeError`` as ``error: argument --x: <message>`` (exit code 2; a
``CommandError`` under ``call_command``), so every check of a value belongs in its type.
"""

from __future__ import annotations

import math
from argparse import ArgumentTypeError
from collections.abc import Callable

from ..store import valid_job_id

#: The largest id a database integer column holds (a bigger one overflows the query, not the filter).
MAX_ID = 2**63 - 1


def whole(low: int, high: int = MAX_ID) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ArgumentTypeError(f"not a whole number: {text[:40]!r}") from None
        if not low <= value <= high:
            raise ArgumentTypeError(f"{text[:40]} is out of range ({low} to {high})")
        return value

    return parse


def real(low: float, *, strictly: bool = False) -> Callable[[str], float]:
    """A finite number at least ``low`` (above it, if ``strictly``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ArgumentTypeError(f"not a number: {text[:40]!r}") from None
        if not math.isfinite(value) or value < low or (strictly and value == low):
            bound = "above" if strictly else "at least"
            raise ArgumentTypeError(f"{text[:40]} is not a finite number {bound} {low:g}")
        return value

    return parse


def job_id(text: str) -> str:
    """A job id: letters, digits, ``_`` and ``-``, 1 to 64 of them (the id rule)."""
    if not valid_job_id(text):
        raise ArgumentTypeError(f"not a job id: {text[:70]!r} (letters, digits, _ and -, 1 to 64 of them)")
    return text
