"""The dashboard's filters: ``{{ moment|when }}``, the one way it shows a time, in Python and in
templates alike; ``{{ name|dotted }}``, a dotted name that breaks at its dots, never mid-word; and
``{{ message|breakable }}``, a message whose URLs and calls break at their punctuation."""

from __future__ import annotations

import datetime as dt
import re

from django import template
from django.utils import dateformat, formats, timezone
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def when(value: dt.datetime | str | None) -> str:
    """Django's localized ``DATETIME_FORMAT`` in the current time zone, with the zone's name.

    The zone is always shown: a list, a group page and an attempt history are read side by side,
    and by operators in other zones than the server's. An ISO string (as attempt histories and
    RQ's job hashes store times) is read as UTC when it names no zone; other text is shown as is.
    """
    if not value:
        return "-"
    moment = _parse(value) if isinstance(value, str) else value
    if moment is None:
        return str(value)
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=dt.UTC)
    local = timezone.localtime(moment)
    return f"{formats.date_format(local, 'DATETIME_FORMAT')} {dateformat.format(local, 'T')}"


def _parse(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


@register.filter
def dotted(value: str) -> SafeString:
    """``value`` escaped, with a line-break opportunity after each dot: ``billing.jobs.Voided`` wraps
    as ``billing.`` / ``jobs.Voided`` in a narrow column, not inside a word."""
    return mark_safe(str(conditional_escape(value)).replace(".", ".<wbr>"))  # escaped first


#: After these a message may wrap: a URL, a host, a call's arguments break at them, not in a word.
_BREAKS = re.compile(r"(?<=[/.,(=?:])")


@register.filter
def breakable(value: str) -> SafeString:
    """``value`` escaped, with a line-break opportunity after each ``/ . , ( = ? :``: an error
    message quoting a URL (``HTTPSConnectionPool(host='api.example.com', ...)``) wraps at its
    punctuation in a narrow column, not inside a word."""
    return mark_safe("<wbr>".join(str(conditional_escape(part)) for part in _BREAKS.split(str(value))))
