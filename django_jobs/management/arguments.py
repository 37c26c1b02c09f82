"""Argument types for the app's commands: a bad value is one argparse error line, never a traceback.

argparse reports an ``ArgumentTypeError`` as ``error: argument --x: <message>`` (exit code 2; a
``CommandError`` under ``call_command``), so every check of a value belongs in its type. And the
user a command that changes something acts as, for the audit trail (:func:`audited_user`).
"""

from __future__ import annotations

import getpass
import math
import os
from argparse import ArgumentParser, ArgumentTypeError
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from django.core.management.base import CommandError

from django_jobs.store import valid_job_id

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

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


def bounded_text(limit: int) -> Callable[[str], str]:
    """Text of at most ``limit`` characters."""

    def parse(text: str) -> str:
        if len(text) > limit:
            raise ArgumentTypeError(f"at most {limit} characters, got {len(text)}")
        return text

    return parse


def job_id(text: str) -> str:
    """A job id: letters, digits, ``_`` and ``-``, 1 to 64 of them (the id rule)."""
    if not valid_job_id(text):
        raise ArgumentTypeError(f"not a job id: {text[:70]!r} (letters, digits, _ and -, 1 to 64 of them)")
    return text


def output_file(text: str) -> Path:
    """A file a command may write: not a directory, in a directory that exists and is writable. The
    write itself can still fail (a full disk, a race); this catches the mistakes made at the prompt."""
    path = Path(text)
    folder = path.parent
    if path.is_dir():
        raise ArgumentTypeError(f"{text[:200]} is a directory; name a file in it")
    if not folder.is_dir():
        raise ArgumentTypeError(f"{text[:200]}: there is no directory {str(folder)[:200]!r}")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ArgumentTypeError(f"{text[:200]} is not writable")
    return path


def audited_user(username: str | None, permission: str) -> AbstractBaseUser:
    """The admin user a change is recorded under (``--user``, else ``JOBS["AUDIT_USER"]``, else the
    login name), who must hold the same ``permission`` as in the admin."""
    from django.contrib.auth import get_user_model

    from django_jobs.conf import jobs_settings

    source = "--user" if username else "JOBS['AUDIT_USER']" if jobs_settings.AUDIT_USER else "your login name"
    username = username or jobs_settings.AUDIT_USER or getpass.getuser()
    users = get_user_model()._default_manager
    try:
        user: AbstractBaseUser = users.get_by_natural_key(username)
    except get_user_model().DoesNotExist:
        raise CommandError(
            f"No admin user {username!r} ({source}): every change is audited; pass --user with your admin "
            "username, or name one in JOBS['AUDIT_USER']."
        ) from None
    if not user.is_active or not user.has_perm(permission):  # type: ignore[attr-defined]
        raise CommandError(f"User {username!r} lacks the {permission!r} permission.")
    return user


def user_argument(parser: ArgumentParser) -> None:
    """``--user``, for every command whose changes are audited."""
    parser.add_argument(
        "--user",
        help="the admin user acting, for the audit log (default: JOBS['AUDIT_USER'], else your login name)",
    )
