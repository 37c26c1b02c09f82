"""Which dead letters an operator means: filters, search and failure groups.

Read-only, and shared by the admin and the ``deadletters`` command, so a search typed in a terminal
selects what the same search selects in the browser.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from dataclasses import dataclass, fields
from typing import Any

from django.db.models import Count, Max, Min, Q, QuerySet
from django.utils.text import smart_split, unescape_string_literal

from django_jobs.models import DeadLetter

SEARCH_FIELDS = ("job_id", "message")
#: Searched only for users who may see payloads: a search would otherwise reveal what they contain.
PAYLOAD_SEARCH_FIELDS = ("args", "kwargs")


def search(queryset: QuerySet[DeadLetter], term: str, *, payload: bool) -> QuerySet[DeadLetter]:
    """The admin's search semantics: every word (or "quoted phrase") must occur in some field."""
    names = SEARCH_FIELDS + PAYLOAD_SEARCH_FIELDS if payload else SEARCH_FIELDS
    for bit in smart_split(term):
        if bit[:1] in ('"', "'") and bit[-1:] == bit[:1]:
            bit = unescape_string_literal(bit)
        queryset = queryset.filter(
            functools.reduce(operator.or_, (Q(**{f"{n}__icontains": bit}) for n in names))
        )
    return queryset


@dataclass(frozen=True)
class Filters:
    """Exact-match filters (the admin's sidebar) plus a failure window and a search term."""

    job_name: str = ""
    exception: str = ""
    queue: str = ""
    status: str = ""
    reason: str = ""
    fingerprint: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None
    search: str = ""

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def apply(self, queryset: QuerySet[DeadLetter], *, payload: bool = True) -> QuerySet[DeadLetter]:
        exact = {
            name: getattr(self, name)
            for name in ("job_name", "exception", "queue", "status", "reason", "fingerprint")
            if getattr(self, name)
        }
        queryset = queryset.filter(**exact)
        if self.since is not None:
            queryset = queryset.filter(created_at__gte=self.since)
        if self.until is not None:
            queryset = queryset.filter(created_at__lt=self.until)
        return search(queryset, self.search, payload=payload)


def groups(queryset: QuerySet[DeadLetter]) -> QuerySet[Any, Any]:
    """Entries grouped by failure fingerprint, most recently seen first, one row per group."""
    return (
        queryset.order_by()
        .values("fingerprint")
        .annotate(
            name=Max("job_name"),
            exception_class=Max("exception"),
            frame=Max("raised_at"),
            entries=Count("pk"),
            open=Count("pk", filter=Q(status=DeadLetter.Status.OPEN)),
            first_seen=Min("first_failed_at"),
            last_seen=Max("created_at"),
        )
        .order_by("-last_seen", "fingerprint")
    )
