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

from .conf import jobs_settings
from .models import DeadLetter

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
    hook = jobs_settings.REDACT
    function = import_string(hook) if isinstance(hook, str) else hook
    return function(data, job_name=job_name)


def _shown(data: Any, job_name: str, indent: int) -> str:
    """Redacted JSON, or a notice: a failing hook must fail closed, never show the unmasked data."""
    try:
        redacted = redact(data, job_name=job_name)
    except Exception:
        logger.exception("The JOBS['REDACT'] hook failed for a %s payload", job_name)
        return "(hidden: the redaction hook failed; see the django_jobs.redaction log)"
    return json.dumps(redacted, indent=indent, sort_keys=True, ensure_ascii=False, default=str)


def payload_json(entry: DeadLetter) -> str:
    """The entry's arguments as indented JSON, redacted. Tagged values (dates, decimals) stay tagged."""
    return _shown({"args": entry.args, "kwargs": entry.kwargs}, entry.job_name, 2)


def raw_json(entry: DeadLetter) -> str:
    """A poison job's Redis hash snapshot, redacted like a payload ('' for decodable jobs)."""
    if not entry.raw:
        return ""
    try:
        data = json.loads(entry.raw)
    except ValueError:
        data = entry.raw
    return _shown(data, entry.job_name, 1)
