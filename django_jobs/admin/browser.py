"""The job browser: the jobs of one queue, a tab per group of states (ready, scheduled, running,
parked, in line, lost, dying), a page of one structure at a time, each job linked to its page.

It reads through ``ops.browse`` (the lifecycle's own structures, never a structure of its own) and
shows what the job page shows: a key's value (payload) only with the payload permission.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST
from redis.exceptions import RedisError

from django_jobs.admin.bulk import BULK_ACTIONS, BULK_LIMIT, BULK_URL_NAME
from django_jobs.admin.jobs import log_many
from django_jobs.core.connections import queue_configs, store_of
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter, Job, JobHistory
from django_jobs.ops import browse
from django_jobs.store import Store, valid_job_id
from django_jobs.store import browse as pages
from django_jobs.store.browse import Listing

#: Jobs per page.
PER_PAGE = 50
#: Members of Redis structures (and rows of the history) a search reads at most.
SEARCH_LOOK = 10_000
#: Seconds between the live view's refreshes.
REFRESH = 5
TABS = [(listing, listing.name.lower().replace("_", " ")) for listing in Listing]
#: The tab of the jobs that ended, read from the history table rather than from Redis.
HISTORY = "history"


if TYPE_CHECKING:
    _Base = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic for the type checker only
    _Base = admin.ModelAdmin


@admin.register(Job)
class JobBrowser(_Base):
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(VIEW_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        return [
            path("", self.admin_site.admin_view(self.browse_view), name="django_jobs_job_changelist"),
            path("bulk/", self.admin_site.admin_view(require_POST(self.bulk_view)), name=BULK_URL_NAME),
        ]

    def bulk_view(self, request: HttpRequest) -> HttpResponse:
        """POST: an action on the jobs ticked, or on every job of the tab (at most :data:`BULK_LIMIT`),
        after a confirmation page. Each job goes through its own transition (a cancel, a retry now),
        which leaves a job that changed state meanwhile as it is and says so; each is audited."""
        action = BULK_ACTIONS.get(request.POST.get("action", ""))
        if action is None:
            raise Http404("No such action: cancel or retry.")
        if not (self.has_view_permission(request) and request.user.has_perm(action.permission)):
            raise PermissionDenied
        asked = _Asked.of(request, list(queue_configs()), request.POST)
        ids = self._chosen(request, asked)
        back = reverse("admin:django_jobs_job_changelist") + asked.link()
        if not ids:
            self.message_user(request, "No job was chosen: nothing changed.", messages.WARNING)
            return HttpResponseRedirect(back)
        if request.POST.get("confirm") != "yes":
            confirm = {
                "action": action,
                "action_name": request.POST["action"],
                "tab": asked.tab_name,
                "ids": ids,
                "asked": asked,
                "back": back,
                "all": request.POST.get("all"),
            }
            return self._render(request, "bulk_confirmation.html", f"{action.label}?", confirm)
        done = {job_id: action.run(job_id, request) for job_id in ids}
        log_many(request, {job_id: f"{action.label} (bulk): {outcome}" for job_id, outcome in done.items()})
        counts = Counter(done.values())
        summary = ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in counts.most_common())
        self.message_user(request, f"{action.label}, {len(ids)} job(s): {summary}.")
        return HttpResponseRedirect(back)

    def _chosen(self, request: HttpRequest, asked: _Asked) -> list[str]:
        """The ids ticked, or with ``all``, those of the tab's listing (Redis jobs only) that match the
        search shown with it."""
        if request.POST.get("all") and isinstance(asked.tab, Listing):
            states = frozenset(pages.LISTED_IN[asked.tab])
            found = browse.jobs([asked.queue], states, self._query(request, asked), limit=BULK_LIMIT)
            return [row.id for row in found.rows]
        ticked = dict.fromkeys(request.POST.getlist("ids"))
        return [job_id for job_id in ticked if valid_job_id(job_id)][:BULK_LIMIT]

    @staticmethod
    def _query(request: HttpRequest, asked: _Asked) -> browse.Query:
        """The search asked for; an argument's value only with the payload permission."""
        payload = request.user.has_perm(deadletter.PAYLOAD_PERMISSION)
        return browse.Query(asked.name, asked.arg if payload else None)

    def browse_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        queues = list(queue_configs())
        asked = _Asked.of(request, queues)
        context: dict[str, Any] = {
            "asked": asked,
            "tab": asked.tab_name,
            "queues": queues,
            "problem": asked.problem,
            "actions": [(name, a) for name, a in BULK_ACTIONS.items() if request.user.has_perm(a.permission)],
            "bulk_all": isinstance(asked.tab, Listing),
            "refresh": REFRESH,
            "search_look": SEARCH_LOOK,
        }
        if asked.queue:
            try:
                context.update(self._page(request, asked))
            except RedisError as exc:
                context["problem"] = f"The Redis server of queue {asked.queue} did not answer: {exc}"
        return self._render(request, "browser.html", "Jobs", context)

    def _render(
        self, request: HttpRequest, template: str, title: str, context: dict[str, Any]
    ) -> HttpResponse:
        frame = {**self.admin_site.each_context(request), "opts": self.opts, "title": title}
        return TemplateResponse(request, f"admin/django_jobs/job/{template}", {**frame, **context})

    def _page(self, request: HttpRequest, asked: _Asked) -> dict[str, Any]:
        store = store_of(asked.queue)
        show_key = request.user.has_perm(deadletter.PAYLOAD_PERMISSION)
        tabs = []
        for listing, label in TABS:
            total = pages.page(store, asked.queue, listing, 0, 0).total
            tabs.append((label, total, asked.link(tab=listing.name.lower(), start=0), listing is asked.tab))
        ended = JobHistory.objects.filter(queue=asked.queue).order_by("-id")
        ended_total = ended.count()
        tabs.append((HISTORY, ended_total, asked.link(tab=HISTORY, start=0), asked.tab == HISTORY))
        searched = None
        if asked.name or asked.arg is not None:
            states = pages.LISTED_IN[asked.tab] if isinstance(asked.tab, Listing) else browse.PAST
            query = self._query(request, asked)
            searched = browse.jobs([asked.queue], states, query, limit=PER_PAGE, look=SEARCH_LOOK)
            rows, total = searched.rows, len(searched.rows)
        else:
            rows, total = self._rows(store, asked, ended, ended_total)
        end = asked.start + len(rows)
        return {
            "searched": searched,
            "search_denied": asked.arg is not None and not show_key,
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
    def _rows(
        store: Store, asked: _Asked, ended: QuerySet[JobHistory], ended_total: int
    ) -> tuple[list[browse.Row], int]:
        """The page's rows, from the tab's Redis structures or from the history; and the tab's total."""
        if not isinstance(asked.tab, Listing):  # the history
            found = ended[asked.start : asked.start + PER_PAGE]
            return [browse.Row.of_past(past) for past in found], ended_total
        page = pages.page(store, asked.queue, asked.tab, asked.start, PER_PAGE)
        rows = [browse.Row(w.id, w.record.name, w.record.queue, w.state, w) for w in page.jobs]
        if asked.tab in (Listing.LOST, Listing.DYING):  # one set per server: this queue's only
            rows = [row for row in rows if row.queue == asked.queue]
        return rows, page.total


class _Asked:
    """The browser's query string, checked: a bad value falls back to the default and says so."""

    def __init__(
        self, queue: str, tab: Listing | str, start: int, problem: str, name: str = "", arg: str | None = None
    ) -> None:
        self.queue, self.tab, self.start, self.problem = queue, tab, start, problem
        self.name, self.arg = name, arg

    @classmethod
    def of(cls, request: HttpRequest, queues: list[str], given: QueryDict | None = None) -> _Asked:
        """The query of ``request`` (or the ``given`` form, a bulk action's POST)."""
        query = request.GET if given is None else given
        problems = []
        queue = query.get("queue", queues[0] if queues else "")
        if queue not in queues:
            problems.append(f"No queue {queue[:100]!r} in RQ_QUEUES.")
            queue = queues[0] if queues else ""
        tabs: dict[str, Listing | str] = {listing.name.lower(): listing for listing in Listing}
        tabs[HISTORY] = HISTORY
        tab = tabs.get(query.get("tab", "ready"))
        if tab is None:
            problems.append(f"No tab {query.get('tab', '')[:40]!r}: one of {', '.join(tabs)}.")
            tab = Listing.READY
        start = query.get("start", "0")
        if not start.isdigit() or len(start) > 12:
            problems.append(f"start must be a whole number, got {start[:20]!r}.")
            start = "0"
        name, arg = query.get("name", "").strip()[:200], query.get("arg")
        return cls(queue, tab, int(start), " ".join(problems), name, arg[:1000] if arg else None)

    @property
    def tab_name(self) -> str:
        return self.tab.name.lower() if isinstance(self.tab, Listing) else self.tab

    def link(self, **changes: Any) -> str:
        query = {"queue": self.queue, "tab": self.tab_name, "start": self.start, **changes}
        query.update({"name": self.name} if self.name else {})
        query.update({"arg": self.arg} if self.arg is not None else {})
        return "?" + urlencode(query)


def _job_url(job_id: str) -> str:
    return reverse("admin:django_jobs_deadletter_job", args=[job_id])


VIEW_PERMISSION = "django_jobs.view_deadletter"
