"""Alert hooks for dead letters, grouped by failure and rate-limited, so a flood is one alert.

Dead letters with the same fingerprint (job name, exception class, raising frame) form a group.
The first one alerts at once and opens a window of ``JOBS["ALERT_WINDOW"]`` seconds, kept in Redis
so every worker process and host shares it; the rest of the window is only counted. When the
window closes, ``flush()`` (a ``runjobs`` maintenance duty) sends one summary with the count and
opens the next window, so a failure that goes on alerts once per window, never once per job.

Each hook in ``JOBS["ALERT_HOOKS"]`` is called with an :class:`Alert`. A failing hook is logged,
never raised into the worker; if Redis cannot be asked, the alert is sent unthrottled.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.mail import mail_admins
from django.utils.module_loading import import_string
from redis import Redis
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core.connections import home
from django_jobs.exceptions import ConfigurationError
from django_jobs.failures.triage import failure_fingerprint
from django_jobs.store import keys, load

if TYPE_CHECKING:
    from django_jobs.models import DeadLetter

logger = logging.getLogger("django_jobs.alerts")

DUE = keys.ALERT_DUE  # fingerprint -> when its window closes, for groups with counted dead letters
#: Seconds a group's count outlives its window when no runjobs flushes it; the next alert reports it.
_KEEP = 7 * 24 * 3600
_PREFIXES = [keys.ALERT_WINDOW_PREFIX, keys.ALERT_COUNT_PREFIX, keys.ALERT_LAST_PREFIX]


@dataclass(frozen=True)
class Alert:
    """What a hook receives: a dead letter and how many of its kind this alert stands for.

    Attributes it lacks are read from the dead letter, so a hook written for a ``DeadLetter``
    (``alert.job_name``, ``alert.traceback``) keeps working.
    """

    dead_letter: DeadLetter
    fingerprint: str
    count: int = 1
    #: True when the window closed: ``dead_letter`` is the latest of ``count`` that were only counted.
    summary: bool = False

    def __getattr__(self, name: str) -> Any:
        if name == "dead_letter":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.dead_letter, name)

    @property
    def text(self) -> str:
        entry = self.dead_letter
        failure = f"{entry.exception}: {entry.message}"
        if self.summary:
            return (
                f"{self.count} more dead letter(s) of job {entry.job_name} in the last "
                f"{jobs_settings.ALERT_WINDOW:g} s, like {failure}"
            )
        more = f" ({self.count - 1} more like it since the last alert)" if self.count > 1 else ""
        return f"Job {entry.job_name} dead-lettered after {entry.attempts} attempt(s): {failure}{more}"


def log_and_mail_admins(alert: Alert) -> None:
    """The default hook: an ERROR line for the log pipeline, and a mail to ``settings.ADMINS``."""
    entry = alert.dead_letter
    logger.error(
        alert.text,
        extra={
            "job_id": entry.job_id,
            "dead_letter_id": entry.pk,
            "fingerprint": alert.fingerprint,
            "count": alert.count,
        },
    )
    times = f" ({alert.count}x)" if alert.count > 1 else ""
    mail_admins(f"[django_jobs] {entry.job_name} dead-lettered{times}", f"{alert.text}\n\n{entry.traceback}")


def webhook(url: str, timeout: float = 5.0) -> Callable[[Alert], None]:
    """An example hook factory: POST a JSON summary to ``url`` (for a chat or paging webhook)."""

    def hook(alert: Alert) -> None:
        entry = alert.dead_letter
        body = json.dumps(
            {
                "text": alert.text,
                "job": entry.job_name,
                "exception": entry.exception,
                "job_id": entry.job_id,
                "attempts": entry.attempts,
                "fingerprint": alert.fingerprint,
                "count": alert.count,
                "summary": alert.summary,
            }
        ).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        urllib.request.urlopen(request, timeout=timeout).close()

    return hook


def fingerprint(dead_letter: DeadLetter) -> str:
    """The group of a dead letter: the dashboard's failure group (its stored ``fingerprint``, or the
    same function over its job, exception and traceback for a row that has none)."""
    given = getattr(dead_letter, "fingerprint", "")
    if given:
        return str(given)
    return failure_fingerprint(dead_letter.job_name, dead_letter.exception, dead_letter.traceback)


def _gate(dead_letter: DeadLetter, key: str) -> int:
    """Count a dead letter in its group's window, on its queue's Redis: the one the ``runjobs`` that
    flushes the group uses."""
    window = max(1, round(jobs_settings.ALERT_WINDOW))
    script = load(home(dead_letter.queue), "alert_gate")
    return int(script(keys=keys.alert_keys(key), args=[window, dead_letter.pk, key, _KEEP]))


def _run_hooks(alert: Alert) -> None:
    for path in jobs_settings.ALERT_HOOKS:
        try:
            hook = import_string(path) if isinstance(path, str) else path
            hook(alert)
        except Exception:
            logger.exception("Dead-letter alert hook %r failed", path)


def fire(dead_letter: DeadLetter) -> None:
    """Alert on a new dead letter now, or only count it while its group's window is open."""
    key = fingerprint(dead_letter)
    try:
        count = _gate(dead_letter, key)
    except (RedisError, ConfigurationError) as exc:
        logger.warning("Alert rate limit unavailable (%s); alerting without it.", exc)
        count = 1
    if count:
        _run_hooks(Alert(dead_letter, key, count))


def flush(connection: Redis, batch: int = 100) -> int:
    """Send one summary for each group whose window closed with dead letters only counted.

    Returns the number of summaries sent. Every ``runjobs`` may call it: the script hands each
    closed window to one caller.
    """
    from django_jobs.models import DeadLetter

    window = max(1, round(jobs_settings.ALERT_WINDOW))
    groups = [
        (key.decode(), int(count), int(pk))
        for key, count, pk in load(connection, "alert_flush")(keys=[DUE], args=[window, batch, *_PREFIXES])
    ]
    entries = DeadLetter.objects.in_bulk([pk for _, _, pk in groups])
    sent = [Alert(entries[pk], key, count, summary=True) for key, count, pk in groups if pk in entries]
    for alert in sent:
        _run_hooks(alert)
    return len(sent)
