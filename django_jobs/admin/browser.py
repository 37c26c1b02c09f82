"""The job browser: the jobs of one queue, a tab per group of states (ready, scheduled, running,
parked, in line, lost, dying), a page of one structure at a time, each job linked to its page.

It reads through ``ops.browse`` (the lifecycle's own structures, never a structure of its own) and
shows what the job page shows: a key's value (payload) only with the payload permission.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode
from redis import Redis
from redis.exceptions import RedisError

from django_jobs.core.connections import get_connection, queue_configs
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter, Job, JobHistory
from django_jobs.ops import browse
from django_jobs.store import browse as pages
from django_jobs.store.browse import Listing

#: Jobs per page.
PER_PAGE = 50
TABS = [(listing, listing.name.lower().replace("_", " ")) for listing in Listing]
#: The tab of the jobs that ended, read from the history table rather than from Redis.
HISTORY = "history"


@admin.register(Job)
class JobBrowser(admin.ModelAdmin[Job]):
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        return [path("", self.admin_site.admin_view(self.browse_view), name="django_jobs_job_changelist")]

    def browse_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        queues = list(queue_configs())
        asked = _Asked.of(request, queues)
        context: dict[str, Any] = {"asked": asked, "queues": queues, "problem": asked.problem}
        if asked.queue:
            try:
                context.update(self._page(request, asked))
            except RedisError as exc:
                context["problem"] = f"The Redis server of queue {asked.queue} did not answer: {exc}"
        return TemplateResponse(
            request,
            "admin/django_jobs/job/browser.html",
            {**self.admin_site.each_context(request), "opts": self.opts, "title": "Jobs", **context},
        )

    def _page(self, request: HttpRequest, asked: _Asked) -> dict[str, Any]:
        connection = get_connection(asked.queue)
        show_key = request.user.has_perm(deadletter.PAYLOAD_PERMISSION)
        tabs = []
        for listing, label in TABS:
            total = pages.page(connection, asked.queue, listing, 0, 0).total
            tabs.append((label, total, asked.link(tab=listing.name.lower(), start=0), listing is asked.tab))
        ended = JobHistory.objects.filter(queue=asked.queue).order_by("-ended_at")
        tabs.append((HISTORY, ended.count(), asked.link(tab=HISTORY, start=0), asked.tab == HISTORY))
        rows, total = self._rows(connection, asked, ended)
        end = asked.start + len(rows)
        return {
            "tabs": tabs,
            "rows": [(row, row.detail(show_key), _job_url(row.id)) for row in rows],
            "total": total,
            "first": asked.start + 1 if rows else asked.start,
            "last": end,
            "previous": asked.link(start=max(asked.start - PER_PAGE, 0)) if asked.start else "",
            "next": asked.link(start=end) if end < total else "",
            "dead": DeadLetter.objects.filter(queue=asked.queue, status=DeadLetter.Status.OPEN).count(),
            "dead_url": reverse("admin:django_jobs_deadletter_changelist")
            + "?"
            + urlencode({"queue": asked.queue}),
        }

    @staticmethod
    def _rows(connection: Redis, asked: _Asked, ended: QuerySet[JobHistory]) -> tuple[list[browse.Row], int]:
        """The page's rows, from the tab's Redis structures or from the history; and the tab's total."""
        if not isinstance(asked.tab, Listing):  # the history
            found = ended[asked.start : asked.start + PER_PAGE]
            return [browse.Row.of_past(past) for past in found], ended.count()
        page = pages.page(connection, asked.queue, asked.tab, asked.start, PER_PAGE)
        rows = [browse.Row(w.id, w.record.name, w.record.queue, w.state, w) for w in page.jobs]
        if asked.tab in (Listing.LOST, Listing.DYING):  # one set per server: this queue's only
            rows = [row for row in rows if row.queue == asked.queue]
        return rows, page.total


class _Asked:
    """The browser's query string, checked: a bad value falls back to the default and says so."""

    def __init__(self, queue: str, tab: Listing | str, start: int, problem: str) -> None:
        self.queue, self.tab, self.start, self.problem = queue, tab, start, problem

    @classmethod
    def of(cls, request: HttpRequest, queues: list[str]) -> _Asked:
        problems = []
        queue = request.GET.get("queue", queues[0] if queues else "")
        if queue not in queues:
            problems.append(f"No queue {queue[:100]!r} in RQ_QUEUES.")
            queue = queues[0] if queues else ""
        tabs: dict[str, Listing | str] = {listing.name.lower(): listing for listing in Listing}
        tabs[HISTORY] = HISTORY
        tab = tabs.get(request.GET.get("tab", "ready"))
        if tab is None:
            problems.append(f"No tab {request.GET.get('tab', '')[:40]!r}: one of {', '.join(tabs)}.")
            tab = Listing.READY
        start = request.GET.get("start", "0")
        if not start.isdigit() or len(start) > 12:
            problems.append(f"start must be a whole number, got {start[:20]!r}.")
            start = "0"
        return cls(queue, tab, int(start), " ".join(problems))

    def link(self, **changes: Any) -> str:
        tab = self.tab.name.lower() if isinstance(self.tab, Listing) else self.tab
        query = {"queue": self.queue, "tab": tab, "start": self.start, **changes}
        return "?" + urlencode(query)


def _job_url(job_id: str) -> str:
    return reverse("admin:django_jobs_deadletter_job", args=[job_id])


VIEW_PERMISSION = "django_jobs.view_deadletter"
