"""The one log line per job outcome: ``key=value`` text by default, a JSON object when
``JOBS["LOG_FORMAT"] = "json"``.

Both carry the job id, name, queue, attempt, outcome and duration, and a failure's exception.
A JSON line also carries the traceback as a field, so it stays one line for the log pipeline; a
text line passes ``exc_info`` instead, so error trackers such as Sentry get the exception.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import traceback
from typing import Any

from redis import Redis

from django_jobs.conf import jobs_settings
from django_jobs.store import Claimed

logger = logging.getLogger("django_jobs.worker")

_LEVELS = {
    "success": logging.INFO,
    "cancelled": logging.INFO,
    "snoozed": logging.INFO,
    "expired": logging.INFO,
}  # the rest, a dead letter's last attempt too, WARNING: a dead letter's one ERROR is its alert


def exception_path(exc: BaseException) -> str:
    """The exception's class as ``module.QualName`` (``builtins.SystemExit``)."""
    cls = type(exc)
    try:
        return f"{cls.__module__}.{cls.__qualname__}"
    except BaseException:  # a metaclass can make even these attributes raise
        return "(an exception class that cannot be named)"


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, else ``repr(exc)``, else a placeholder: job code may raise an exception whose
    ``__str__`` raises (or returns a non-string), and it must still be judged and logged."""
    for render in (str, repr):
        try:
            text = render(exc)
        except BaseException:  # even SystemExit from a __str__ is the exception's fault, not ours
            continue
        return str.__str__(text)  # a plain str, even from a str subclass with odd methods
    return f"<unprintable {exception_path(exc)} object>"


def _formatted(exc: BaseException) -> str | None:
    try:
        return "".join(traceback.format_exception(exc))
    except BaseException:  # e.g. __notes__ that cannot be read
        return None


def exception_traceback(exc: BaseException) -> str:
    """The formatted traceback, or a placeholder if the exception cannot be formatted."""
    text = _formatted(exc)
    if text is None:
        return f"{exception_path(exc)}: {exception_text(exc)}\n(the traceback could not be formatted)\n"
    return text


_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _text_value(value: object) -> str:
    if type(value) is int or type(value) is float:
        return str(value)  # never quoted: skip the search, on every job
    text = str(value)
    if text and not _NEEDS_QUOTES.search(text):
        return text
    return json.dumps(text)  # quoted and escaped: a message with spaces or newlines stays one field


def log_outcome(
    outcome: str,
    name: str,
    claimed: Claimed,
    duration: float | None,
    exc: BaseException | None = None,
    *,
    snooze: float | None = None,
) -> None:
    """Log how one attempt ended (``outcome`` is an ``outcomes.Outcome``); failures are WARNING (the
    dead letter's alert is the ERROR), a cancel (asked for), a snooze (``snooze``: seconds it waits)
    and an expiry INFO."""
    level = _LEVELS.get(str(outcome), logging.WARNING)
    if not logger.isEnabledFor(level):
        return  # the line would be dropped: skip building it, on every job
    fields: dict[str, Any] = {
        "job": name,
        "job_id": claimed.id,
        "queue": claimed.queue,
        "attempt": claimed.attempt,
        "outcome": str(outcome),
    }
    if duration is not None:  # None: the attempt did not run here (a lease reaped from another host)
        fields["duration"] = round(duration, 6)
    if snooze is not None:
        fields["snooze"] = round(snooze, 3)
    if exc is not None:
        fields["error"] = f"{exception_path(exc)}: {exception_text(exc)}"
    exc_info = None
    if jobs_settings.LOG_FORMAT == "json":
        line = dict(fields)
        if exc is not None:
            line["traceback"] = exception_traceback(exc)
        message = json.dumps(line)
    else:
        message = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        # An exception the logging formatter cannot format would cost the whole line.
        exc_info = exc if exc is None or _formatted(exc) is not None else None
    if exc_info is None and _console is not None and _console.wrote(level, message):
        return
    logger.log(level, message, extra=fields, exc_info=exc_info)


#: What ``runjobs`` prints when the project configured no logging for it: time, level, process, message.
CONSOLE_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(message)s"


class _Console:
    """The console ``console_defaults`` set up, as a shortcut for the outcome line.

    Logging's machinery (a LogRecord, a look at the caller's frame, a Formatter) costs about 30 µs a
    line: as much as the rest of a no-op job's run in a work process, on every job. While this console
    is still the only place the line can go (the project added no handler, filter or level since),
    the line is written to its stream directly, in CONSOLE_FORMAT; anything else goes through logging.
    """

    def __init__(self, handler: logging.StreamHandler[Any], package: logging.Logger) -> None:
        self.handler = handler
        self.formatter = handler.formatter
        self.package = package
        self.second = -1
        self.stamp = ""

    def _alone(self, level: int) -> bool:
        handler, package = self.handler, self.package
        return (
            package.handlers == [handler]
            and not (handler.filters or package.filters or logger.handlers or logger.filters)
            and logger.propagate
            and not logging.root.handlers
            and handler.formatter is self.formatter
            and handler.level <= level
        )  # the levels of the loggers: log_outcome asked them first

    def wrote(self, level: int, message: str) -> bool:
        """Write ``message`` as the console would, if nothing else listens; False: log it instead."""
        if not self._alone(level):
            return False
        now = time.time()
        second = int(now)
        if second != self.second:  # the date and time part, formatted once a second, not once a line
            self.second, self.stamp = second, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        millis = int((now - second) * 1000)
        line = f"{self.stamp},{millis:03d} {logging.getLevelName(level)} [{os.getpid()}] {message}\n"
        try:
            with self.handler.lock or contextlib.nullcontext():
                self.handler.stream.write(line)
                self.handler.flush()
        except Exception:  # a closed or broken stream: logging's own path reports it its way
            return False
        return True


_console: _Console | None = None
_VERBOSITY = {0: logging.WARNING, 1: logging.INFO}


def console_defaults(verbosity: int) -> bool:
    """Print django_jobs' logs to stderr, as ``rqworker`` and ``celery worker`` do, unless the project
    configured logging for django_jobs or the root logger itself; returns whether it did.

    Without this a fresh project (no ``LOGGING``) sees only warnings: Python's last-resort handler
    drops the start-up line and every ``outcome=success``. ``verbosity`` is ``runjobs -v``: 0 warnings
    and errors only, 1 (the default) the INFO lines too, 2 and more DEBUG as well.
    """
    if _configured():
        return False
    global _console
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(CONSOLE_FORMAT))
    package = logging.getLogger("django_jobs")
    package.addHandler(handler)
    package.setLevel(_VERBOSITY.get(verbosity, logging.DEBUG))
    _console = _Console(handler, package)
    return True


def _configured() -> bool:
    """Whether the root logger or any django_jobs logger has a handler or a level of its own."""
    if logging.getLogger().handlers:
        return True
    loggers = logging.Logger.manager.loggerDict
    return any(
        isinstance(found, logging.Logger) and (found.handlers or found.level != logging.NOTSET)
        for name, found in loggers.items()
        if name == "django_jobs" or name.startswith("django_jobs.")
    )


def server_name(connection: Redis) -> str:
    """Where a client points, without its password."""
    pool = connection.connection_pool
    service = getattr(pool, "service_name", None)
    if service:  # behind Sentinel: the master's address changes with failovers
        return f"sentinel:{service}"
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    return f"redis://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def redis_location(connection: Redis) -> str:
    """``host:port/db`` (or the socket, or ``sentinel:<master name>``) of a client, for the start-up
    line; never the password."""
    return server_name(connection).removeprefix("redis://")
