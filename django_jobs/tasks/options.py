"""The backend's ``OPTIONS``: the timeout, retry policy and permanent exceptions of every task
(``TIMEOUT``, ``RETRY``, ``PERMANENT``), per-task overrides (``TASKS``: {task path: {"timeout",
"retry", "permanent"}}), and the database whose commit enqueued tasks wait for (``DATABASE``).

Read once per backend. Each problem is kept under its scope (the backend's, or one task's), so a bad
entry stops that task only; ``check()`` reports them all.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_jobs.policy import RetryPolicy

#: Seconds a task may run when neither ``TIMEOUT`` nor its own ``timeout`` says otherwise.
DEFAULT_TIMEOUT = 300.0

_BACKEND_KEYS = ("TIMEOUT", "RETRY", "PERMANENT", "DATABASE", "TASKS")
_TASK_KEYS = ("timeout", "retry", "permanent")


@dataclass(frozen=True)
class TaskSettings:
    """How django_jobs runs one task."""

    timeout: float = DEFAULT_TIMEOUT
    retry: RetryPolicy | None = None  # None: JOBS["DEFAULT_RETRY"], read when the task fails
    permanent: tuple[type[BaseException], ...] = ()


@dataclass(frozen=True)
class BackendOptions:
    """``OPTIONS`` as read: the settings of each task, and what is wrong, by scope ("" is the backend's)."""

    defaults: TaskSettings = TaskSettings()
    database: str | None = None
    tasks: Mapping[str, TaskSettings] = field(default_factory=dict)
    problems: Mapping[str, list[str]] = field(default_factory=dict)

    def settings_for(self, name: str) -> TaskSettings:
        return self.tasks.get(name, self.defaults)

    def problems_of(self, name: str) -> list[str]:
        """What stops the task ``name``: the backend's problems and its own entry's."""
        return [*self.problems.get("", []), *self.problems.get(name, [])]


class _Reader:
    """Reads values, collecting a problem (with where it is) for each one it refuses."""

    def __init__(self) -> None:
        self.problems: dict[str, list[str]] = {}

    def refuse(self, scope: str, message: str) -> None:
        self.problems.setdefault(scope, []).append(message)

    def keys(self, scope: str, where: str, given: Mapping[Any, Any], known: tuple[str, ...]) -> None:
        for key in given:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
            if key not in known:
                self.refuse(scope, f"{where} has an unknown key {key!r} ({hint})")

    def timeout(self, scope: str, where: str, value: object, default: float) -> float:
        if value is None:
            return default
        seconds = _seconds(value)
        if seconds is None:
            self.refuse(scope, f"{where} must be a positive, finite number of seconds, got {value!r}")
            return default
        return seconds

    def retry(self, scope: str, where: str, value: object, default: RetryPolicy | None) -> RetryPolicy | None:
        if value is None:
            return default
        try:
            if not isinstance(value, Mapping):
                raise TypeError(f"got {value!r}")
            return RetryPolicy(**value)
        except (TypeError, ValueError) as exc:
            keys = "max_attempts, base, factor, max_delay"
            self.refuse(scope, f"{where} must be a dict of RetryPolicy arguments ({keys}): {exc}")
            return default

    def permanent(
        self, scope: str, where: str, value: object, default: tuple[type[BaseException], ...]
    ) -> tuple[type[BaseException], ...]:
        if value is None:
            return default
        if isinstance(value, str) or not isinstance(value, list | tuple):
            self.refuse(scope, f"{where} must be a list of exception classes' dotted paths, got {value!r}")
            return default
        found = []
        for path in value:
            try:
                cls = import_string(path) if isinstance(path, str) else path
            except ImportError as exc:
                self.refuse(scope, f"{where} names {path!r}, which cannot be imported ({exc})")
                continue
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                self.refuse(scope, f"{where} names {path!r}, which is not an exception class")
                continue
            found.append(cls)
        return tuple(found)


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _database(reader: _Reader, where: str, value: object) -> str | None:
    if value is None or (isinstance(value, str) and value in settings.DATABASES):
        return value
    reader.refuse("", f"{where}['DATABASE'] is {value!r}, which is not in settings.DATABASES")
    return None


def _task(reader: _Reader, where: str, name: str, entry: object, defaults: TaskSettings) -> TaskSettings:
    where = f"{where}['TASKS'][{name!r}]"
    if not isinstance(entry, Mapping):
        reader.refuse(name, f"{where} must be a dict with keys {', '.join(_TASK_KEYS)}, got {entry!r}")
        return defaults
    reader.keys(name, where, entry, _TASK_KEYS)
    return TaskSettings(
        reader.timeout(name, f"{where}['timeout']", entry.get("timeout"), defaults.timeout),
        reader.retry(name, f"{where}['retry']", entry.get("retry"), defaults.retry),
        reader.permanent(name, f"{where}['permanent']", entry.get("permanent"), defaults.permanent),
    )


def _tasks(reader: _Reader, where: str, given: object, defaults: TaskSettings) -> dict[str, TaskSettings]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        reader.refuse("", f"{where}['TASKS'] must be a dict of {{task path: settings}}, got {given!r}")
        return {}
    return {str(name): _task(reader, where, str(name), entry, defaults) for name, entry in given.items()}


def parse(alias: str, options: object) -> BackendOptions:
    """Read ``TASKS[alias]["OPTIONS"]``; every value it refuses is a problem, and its default stands."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    reader = _Reader()
    if not isinstance(options, Mapping):
        reader.refuse("", f"{where} must be a dict, got {options!r}")
        return BackendOptions(problems=reader.problems)
    reader.keys("", where, options, _BACKEND_KEYS)
    defaults = TaskSettings(
        timeout=reader.timeout("", f"{where}['TIMEOUT']", options.get("TIMEOUT"), DEFAULT_TIMEOUT),
        retry=reader.retry("", f"{where}['RETRY']", options.get("RETRY"), None),
        permanent=reader.permanent("", f"{where}['PERMANENT']", options.get("PERMANENT"), ()),
    )
    return BackendOptions(
        defaults=defaults,
        database=_database(reader, where, options.get("DATABASE")),
        tasks=_tasks(reader, where, options.get("TASKS"), defaults),
        problems=reader.problems,
    )
