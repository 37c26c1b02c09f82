"""Alert hooks for dead letters. A failing hook is logged, never raised into the worker."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.core.mail import mail_admins
from django.utils.module_loading import import_string

from .conf import jobs_settings

if TYPE_CHECKING:
    from .models import DeadLetter

logger = logging.getLogger("django_jobs.alerts")


def log_and_mail_admins(dead_letter: DeadLetter) -> None:
    """The default hook: an ERROR line for the log pipeline, and a mail to ``settings.ADMINS``."""
    summary = (
        f"Job {dead_letter.job_name} dead-lettered after {dead_letter.attempts} attempt(s): "
        f"{dead_letter.exception}: {dead_letter.message}"
    )
    logger.error(summary, extra={"job_id": dead_letter.job_id, "dead_letter_id": dead_letter.pk})
    mail_admins(
        f"[django_jobs] {dead_letter.job_name} dead-lettered", f"{summary}\n\n{dead_letter.traceback}"
    )


def webhook(url: str, timeout: float = 5.0) -> Callable[[DeadLetter], None]:
    """An example hook factory: POST a JSON summary to ``url`` (for a chat or paging webhook)."""

    def hook(dead_letter: DeadLetter) -> None:
        body = json.dumps(
            {
                "text": f"Job {dead_letter.job_name} dead-lettered: {dead_letter.message}",
                "exception": dead_letter.exception,
                "job_id": dead_letter.job_id,
                "attempts": dead_letter.attempts,
            }
        ).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=timeout).close()

    return hook


def fire(dead_letter: DeadLetter) -> None:
    """Run every configured hook; each failure is logged and the rest still run."""
    for path in jobs_settings.ALERT_HOOKS:
        try:
            hook = import_string(path) if isinstance(path, str) else path
            hook(dead_letter)
        except Exception:
            logger.exception("Dead-letter alert hook %r failed", path)
