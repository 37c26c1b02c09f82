"""Masking secrets in payloads before a person sees them, in the admin or in a terminal.

The stored row keeps the real arguments (a requeue needs them); only what is shown is redacted,
through the ``JOBS["REDACT"]`` hook.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.utils.module_loading import import_string
from django.views.debug import SafeExceptionReporterFilter

from django_jobs.conf import jobs_settings
from django_jobs.models import DeadLetter

logger = logging.getLogger("django_jobs.redaction")

#: Keys whose values are masked: the same pattern Django's error reports use for settings.
SECRET_KEYS = SafeExceptionReporterFilter.hidden_settings
MASK = SafeExceptionReporterFilter.cleansed_substitute


def mask_secrets(data: Any, *, job_name: str) -> Any:
    """The default hook: mask every value stored under a key that looks secret, at any depth."""
    if isinstance(data, dict):
        return {
            key: MASK if SECRET_KEYS.search(str(key)) else mask_secrets(value, job_name=job_name)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [mask_secrets(item, job_name=job_name) for item in data]
    return data


def redact(data: Any, *, job_name: str) -> Any:
    """``data`` through the ``JOBS["REDACT"]`` hook, and with it every JSON document nested in its
    strings (an argument that is itself encoded JSON, a job hash's ``data`` field)."""
    hook = jobs_settings.REDACT
    function = import_string(hook) if isinstance(hook, str) else hook
    return function(_nested(data, job_name), job_name=job_name)


def _nested(data: Any, job_name: str) -> Any:
    """``data`` with each string that holds JSON redacted, and still a string."""
    if isinstance(data, dict):
        return {key: _nested(value, job_name) for key, value in data.items()}
    if isinstance(data, list):
        return [_nested(item, job_name) for item in data]
    if isinstance(data, str) and data.lstrip()[:1] in ("{", "[", '"'):  # '"': JSON encoded twice
        try:
            inner = json.loads(data)
        except ValueError:
            return data
        return json.dumps(redact(inner, job_name=job_name), ensure_ascii=False, default=str)
    return data


def _shown(data: Any, job_name: str, indent: int) -> str:
    """Redacted JSON, or a notice: a failing hook must fail closed, never show the unmasked data."""
    try:
        redacted = redact(data, job_name=job_name)
    except Exception:
        logger.exception("The JOBS['REDACT'] hook failed for a %s payload", job_name)
        return "(hidden: the redaction hook failed; see the django_jobs.redaction log)"
    return json.dumps(redacted, indent=indent, sort_keys=True, ensure_ascii=False, default=str)


def shown(data: Any, job_name: str) -> str:
    """Data of a job (its arguments, its result) as indented JSON for a page, redacted."""
    return _shown(data, job_name, 2)


def payload_json(entry: DeadLetter) -> str:
    """The entry's arguments as indented JSON, redacted. Tagged values (dates, decimals) stay tagged."""
    return shown({"args": entry.args, "kwargs": entry.kwargs}, entry.job_name)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _raw_field(field: str, value: Any) -> Any:
    """What the snapshot shows of one hash field. Redaction masks JSON by key, so what is not JSON
    is hidden: ``data`` that is compressed, pickled or cut short, bytes that were not text (shown
    as U+FFFD), and the argument list of an RQ description (``func(password='...')``)."""
    if not isinstance(value, str):
        return value
    if "\ufffd" in value or (field == "data" and not _is_json(value)):
        return f"(hidden: {len(value)} characters that are not JSON; redaction cannot see inside them)"
    if field == "description" and "(" in value:
        return value.partition("(")[0] + "(…)"
    return value


def raw_json(entry: DeadLetter) -> str:
    """A poison job's Redis hash snapshot, redacted like a payload ('' for decodable jobs).

    A snapshot that is not a JSON object (cut short) cannot be redacted, so it is not shown.
    """
    if not entry.raw:
        return ""
    try:
        fields = json.loads(entry.raw)
    except (ValueError, RecursionError):
        fields = None
    if not isinstance(fields, dict):
        return (
            f"(hidden: this {len(entry.raw)}-character snapshot is not a JSON object; it cannot be redacted)"
        )
    return _shown({key: _raw_field(key, value) for key, value in fields.items()}, entry.job_name, 1)
