"""The one log line per job outcome: ``key=value`` text by default, a JSON object when
``JOBS["LOG_FORMAT"] = "json"``.

Both carry the job id, name, queue, attempt, outcome and duration, and a failure's exception.
A JSON line also carries the traceback as a field, so it stays one line for the log pipeline; a
text line passes ``exc_info`` instead, so error trackers such as Sentry get the exception.
"""

from __future__ import annotations

import json
import logging
import traceback
from typing import Any

from .conf import jobs_settings
from .store import Claimed

logger = logging.getLogger("django_jobs.worker")

_LEVELS = {"success": logging.INFO, "dead": logging.ERROR}


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


def _text_value(value: object) -> str:
    text = str(value)
    if text and not any(c.isspace() or c in '"=' for c in text):
        return text
    return json.dumps(text)  # quoted and escaped: a message with spaces or newlines stays one field


def log_outcome(
    outcome: str, name: str, claimed: Claimed, duration: float, exc: BaseException | None = None
) -> None:
    """Log how one attempt ended (``outcome`` is an ``execution.Outcome``); failures are WARNING,
    dead letters ERROR."""
    fields: dict[str, Any] = {
        "job": name,
        "job_id": claimed.id,
        "queue": claimed.queue,
        "attempt": claimed.attempt,
        "outcome": str(outcome),
        "duration": round(duration, 6),
    }
    if exc is not None:
        fields["error"] = f"{exception_path(exc)}: {exception_text(exc)}"
    level = _LEVELS.get(str(outcome), logging.WARNING)
    if jobs_settings.LOG_FORMAT == "json":
        line = dict(fields)
        if exc is not None:
            line["traceback"] = exception_traceback(exc)
        logger.log(level, json.dumps(line), extra=fields)
    else:
        message = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        # An exception the logging formatter cannot format would cost the whole line.
        readable = exc is None or _formatted(exc) is not None
        logger.log(level, message, extra=fields, exc_info=exc if readable else None)
