"""The dead-letter dashboard in the Django admin: list, failure groups, detail, queue overview.

Thin by design: state changes go through ``deadletter.py``, queries through ``selection.py`` and
``overview.py``. Every view and action checks its own permission and answers 403 without it (a
hidden button is not a permission check), and nothing changes on GET.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, QuerySet
from django.db.models.functions import Left
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from django_jobs.admin.jobs import JobPages
from django_jobs.admin.pauses import PausePages
from django_jobs.conf import jobs_settings
from django_jobs.failures import deadletter, redaction, selection
from django_jobs.flow import pausing
from django_jobs.models import DeadLetter
from django_jobs.ops import overview
from django_jobs.templatetags.django_jobs_admin import breakable, dotted, when

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.contrib.admin.options import _FieldsetSpec

    _Base = admin.ModelAdmin[DeadLetter]
else:
    _Base = admin.ModelAdmin

#: Columns the list never shows: loading them for a page of 100,000 entries would dominate it.
LIST_DEFERRED = ("args", "kwargs", "raw", "traceback", "history", "message")
#: Query parameters of the change list that select a page or a display, not entries.
NOT_FILTERS = ("p", "all", "o", "e", "_facets")


class FailureGroupFilter(admin.SimpleListFilter):
    """The failure-group filter the grouped view links to; shown only while it is active."""

    title = "failure group"
    parameter_name = "fingerprint"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if not value:
            return []
        group = (
            DeadLetter.objects.filter(fingerprint=value)
            .values_list("job_name", "exception", "raised_at")
            .first()
        )
        return [(value, " · ".join(part for part in group if part) if group else value)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> QuerySet[DeadLetter]:
        value = self.value()
        return queryset.filter(fingerprint=value) if value else queryset


class DeadLetterChangeList(ChangeList):
    """Loads only the listed columns of the shown page. Actions and the "matching" views still get
    the plain queryset from ``get_queryset``."""

    def get_results(self, request: HttpRequest) -> None:
        self.queryset = self.queryset.defer(*LIST_DEFERRED).annotate(message_start=Left("message", 120))
        super().get_results(request)


@admin.register(DeadLetter)
class DeadLetterAdmin(_Base, JobPages, PausePages):
    # Four columns, not eight: with Django's navigation sidebar and the filters open, a 1280 px
    # screen leaves the table about 630 px. Job, queue, exception and message stack in one cell.
    list_display = ("failure", "attempts", "failures", "status")
    list_filter = ("status", "job_name", "exception", "queue", "reason", FailureGroupFilter)
    date_hierarchy = "created_at"
    search_help_text = "Job id and message; with the payload permission, the arguments too."
    # One COUNT per page: the filtered one. The unfiltered total would scan the table again.
    show_full_result_count = False
    # Facet counts cost one aggregate per filter over the whole selection: the grouped view counts instead.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    actions = ["requeue", "discard"]
    change_form_template = "admin/django_jobs/deadletter/change_form.html"
    change_list_template = "admin/django_jobs/deadletter/change_list.html"

    # --- permissions -----------------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: DeadLetter | None = None) -> bool:
        return False  # rows change only through the actions below

    def has_view_payload_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(deadletter.PAYLOAD_PERMISSION)

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(deadletter.REQUEUE_PERMISSION)

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(deadletter.DISCARD_PERMISSION)

    @staticmethod
    def _require(allowed: bool) -> None:
        if not allowed:
            raise PermissionDenied

    # --- list --------------------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DeadLetterChangeList

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        payload = selection.PAYLOAD_SEARCH_FIELDS if self.has_view_payload_permission(request) else ()
        return selection.SEARCH_FIELDS + payload

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter], search_term: str
    ) -> tuple[QuerySet[DeadLetter], bool]:
        payload = self.has_view_payload_permission(request)
        return selection.search(queryset, search_term, payload=payload), False

    @admin.display(description="failure", ordering="job_name")
    def failure(self, obj: DeadLetter) -> str:
        return format_html(
            '<span class="djjobs-job">{}</span> <span class="djjobs-muted">on {}</span>'
            '<span class="djjobs-exception">{}</span><span class="djjobs-message">{}</span>',
            dotted(obj.job_name),
            obj.queue,
            dotted(obj.exception),
            getattr(obj, "message_start", ""),
        )

    @admin.display(description="last failure", ordering="created_at")
    def failures(self, obj: DeadLetter) -> str:
        last, first = when(obj.created_at), when(obj.first_failed_at)
        if obj.first_failed_at is None or first == last:
            return last
        return format_html('{}<span class="djjobs-muted djjobs-first">first {}</span>', last, first)

    @admin.display(description="first failure")
    def first_failure(self, obj: DeadLetter) -> str:
        return when(obj.first_failed_at)

    @admin.display(description="last failure")
    def last_failure(self, obj: DeadLetter) -> str:
        return when(obj.created_at)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django silently ignores an action the user may not run; an operator deserves a 403.
        posted = request.POST.getlist("action") if request.method == "POST" else []
        allowed = self.get_actions(request)
        self._require(all(action in allowed for action in posted if action))
        context = {**self._links(request), **(extra_context or {})}
        return super().changelist_view(request, context)

    def _links(self, request: HttpRequest) -> dict[str, Any]:
        return {
            "filter_query": self._filter_query(request),
            "can_requeue": self.has_requeue_permission(request),
            "can_view_overview": request.user.has_perm(deadletter.OVERVIEW_PERMISSION),
        }

    @staticmethod
    def _filter_query(request: HttpRequest) -> str:
        """This request's filters and search as a query string, without page or display options."""
        params = request.GET.copy()
        for name in NOT_FILTERS:
            params.pop(name, None)
        return params.urlencode()

    def _filtered(self, request: HttpRequest) -> QuerySet[DeadLetter]:
        """Exactly the entries the change list selects for this request's filters and search."""
        return self.get_changelist_instance(request).get_queryset(request)

    # --- actions -----------------------------------------------------------------------------------

    def _requeue(self, request: HttpRequest, entries: deadletter.Entries) -> None:
        done = deadletter.requeue(entries, actor=request.user)
        rate = jobs_settings.REQUEUE_RATE
        spread = f", released at {rate:g} per second" if len(done) > 1 else ""
        self.message_user(request, f"Requeued {len(done)} dead letter(s){spread}.", messages.SUCCESS)
        unknown = "no job of that name is registered"
        for left, why in ((done.unknown, unknown), (done.refused, deadletter.REFUSED)):
            for name, count in left.items():
                which = f"{count} entr{'y' if count == 1 else 'ies'} of {name!r}"
                self.message_user(request, f"{which} left open: {why}.", messages.WARNING)

    @admin.action(description="Requeue selected dead letters", permissions=["requeue"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> HttpResponse | None:
        if request.POST.get("select_across") == "1":  # "all N matching": confirm the count first
            url = reverse("admin:django_jobs_deadletter_requeue_matching")
            return HttpResponseRedirect(f"{url}?{self._filter_query(request)}")
        self._requeue(request, queryset)
        return None

    @admin.action(description="Discard selected dead letters", permissions=["discard"])
    def discard(self, request: HttpRequest, queryset: deadletter.Entries) -> None:
        count = deadletter.discard(queryset, actor=request.user)
        self.message_user(request, f"Discarded {count} dead letter(s).", messages.SUCCESS)

    # --- detail ------------------------------------------------------------------------------------

    def get_fieldsets(self, request: HttpRequest, obj: DeadLetter | None = None) -> _FieldsetSpec:
        payload = (
            ("payload", "raw_snapshot") if self.has_view_payload_permission(request) else ("payload_hidden",)
        )
        return [
            (
                None,
                {
                    "fields": (
                        ("job_id", "status"),
                        ("job_name", "queue"),
                        ("reason", "attempts"),
                        ("first_failure", "last_failure"),
                    )
                },
            ),
            ("Failure", {"fields": ("exception", "message", "raised_at", "failure_group")}),
            ("Payload", {"fields": payload}),
            ("Traceback", {"fields": ("traceback_text",)}),
            ("Attempts", {"fields": ("attempt_history",)}),
            ("Requeue", {"fields": ("requeued_job", "later_failures", "requeued_from")}),
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: DeadLetter | None = None) -> list[str]:
        return flatten_fieldsets(self.get_fieldsets(request, obj))

    @admin.display(description="payload")
    def payload(self, obj: DeadLetter) -> str:
        return format_html('<pre class="djjobs-pre">{}</pre>', redaction.payload_json(obj))

    @admin.display(description="Redis hash")
    def raw_snapshot(self, obj: DeadLetter) -> str:
        raw = redaction.raw_json(obj)
        return format_html('<pre class="djjobs-pre">{}</pre>', raw) if raw else "-"

    @admin.display(description="payload")
    def payload_hidden(self, obj: DeadLetter) -> str:
        return "Hidden: seeing payloads needs the “Can view dead-letter payloads” permission."

    @admin.display(description="traceback")
    def traceback_text(self, obj: DeadLetter) -> str:
        return format_html('<pre class="djjobs-pre">{}</pre>', obj.traceback or "-")

    @admin.display(description="failure group")
    def failure_group(self, obj: DeadLetter) -> str:
        url = reverse("admin:django_jobs_deadletter_changelist")
        return format_html(
            '<a href="{}?fingerprint={}">all entries of this failure</a>', url, obj.fingerprint
        )

    @admin.display(description="attempt history")
    def attempt_history(self, obj: DeadLetter) -> str:
        rows = [
            (
                row.get("attempt", ""),
                when(row.get("at")),
                dotted(row.get("exception", "")),
                breakable(row.get("message", "")),
            )
            for row in obj.history
            if isinstance(row, dict)
        ]
        if not rows:
            return "-"
        return format_html(
            '<table class="djjobs-table djjobs-history"><thead><tr><th>attempt</th><th>at</th>'
            "<th>exception</th><th>message</th></tr></thead><tbody>{}</tbody></table>",
            format_html_join(
                "",
                '<tr><td>{}</td><td class="nowrap">{}</td><td>{}</td><td class="djjobs-text">{}</td></tr>',
                rows,
            ),
        )

    @admin.display(description="requeued as")
    def requeued_job(self, obj: DeadLetter) -> str:
        if not obj.requeued_job_id:
            return "-"
        url = reverse("admin:django_jobs_deadletter_job", args=[obj.requeued_job_id])
        return format_html('<a href="{}">job {}</a>', url, obj.requeued_job_id)

    @admin.display(description="failed again as")
    def later_failures(self, obj: DeadLetter) -> str:
        later = [
            (reverse("admin:django_jobs_deadletter_change", args=[entry.pk]), entry)
            for entry in obj.later_failures.only("pk", "job_name", "exception")
        ]
        return format_html_join(", ", '<a href="{}">{}</a>', later) if later else "-"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {
            "can_requeue": self.has_requeue_permission(request),
            "can_discard": self.has_discard_permission(request),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    # --- extra views -------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        def view(
            function: Callable[..., HttpResponse], post_only: bool = False
        ) -> Callable[..., HttpResponse]:
            return self.admin_site.admin_view(require_POST(function) if post_only else function)

        return [
            path("groups/", view(self.groups_view), name="django_jobs_deadletter_groups"),
            path(
                "requeue-matching/",
                view(self.requeue_matching_view),
                name="django_jobs_deadletter_requeue_matching",
            ),
            path("overview/", view(self.overview_view), name="django_jobs_overview"),
            path("overview/pause/", view(self.pause_view, True), name="django_jobs_pause"),
            path("overview/resume/", view(self.resume_view, True), name="django_jobs_resume"),
            path("job/", view(self.find_job_view), name="django_jobs_deadletter_find_job"),
            path("job/<str:job_id>/", view(self.job_view), name="django_jobs_deadletter_job"),
            path("job/<str:job_id>/cancel/", view(self.cancel_job_view, True), name="django_jobs_job_cancel"),
            path("job/<str:job_id>/retry/", view(self.retry_job_view, True), name="django_jobs_job_retry"),
            path("<int:pk>/requeue/", view(self.requeue_one, True), name="django_jobs_deadletter_requeue"),
            path("<int:pk>/discard/", view(self.discard_one, True), name="django_jobs_deadletter_discard"),
            *super().get_urls(),
        ]

    def _render(self, request: HttpRequest, template: str, title: str, **context: Any) -> TemplateResponse:
        return TemplateResponse(
            request,
            f"admin/django_jobs/deadletter/{template}",
            {**self.admin_site.each_context(request), "opts": self.opts, "title": title, **context},
        )

    def _bad_filters(self) -> HttpResponse:
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_changelist") + "?e=1")

    def groups_view(self, request: HttpRequest) -> HttpResponse:
        """Entries grouped by failure fingerprint, for the current filters of the list."""
        self._require(self.has_view_permission(request))
        try:
            groups = selection.groups(self._filtered(request))
        except IncorrectLookupParameters:
            return self._bad_filters()
        limit = 200
        return self._render(
            request,
            "groups.html",
            "Dead letters by failure",
            groups=groups[:limit],
            limit=limit,
            **self._links(request),
        )

    def requeue_matching_view(self, request: HttpRequest) -> HttpResponse:
        """GET: how many open entries match, and a form to requeue them. POST: requeue them.

        The form carries the newest id the operator saw, so entries that fail after the page was
        shown are not replayed unseen.
        """
        self._require(self.has_requeue_permission(request))
        try:
            matching = self._filtered(request).filter(status=DeadLetter.Status.OPEN)
        except IncorrectLookupParameters:
            return self._bad_filters()
        query = self._filter_query(request)
        if request.method == "POST":
            try:
                through = int(request.POST["through"])
            except (KeyError, ValueError):
                return HttpResponseBadRequest("The confirmation form is incomplete.")
            self._requeue(request, matching.filter(pk__lte=through))
            return HttpResponseRedirect(f"{reverse('admin:django_jobs_deadletter_changelist')}?{query}")
        found = matching.aggregate(count=Count("pk"), through=Max("pk"))
        rate = jobs_settings.REQUEUE_RATE
        return self._render(
            request,
            "requeue_confirmation.html",
            "Requeue all matching dead letters?",
            count=found["count"],
            through=found["through"] or 0,
            rate=rate,
            seconds=round(found["count"] / rate),
            filters=[(name, value) for name, value in request.GET.items() if name not in NOT_FILTERS],
            filter_query=query,
        )

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        self._require(request.user.has_perm(deadletter.OVERVIEW_PERMISSION))
        return self._render(
            request,
            "overview.html",
            "Queue overview",
            overview=overview.snapshot(),
            can_pause=request.user.has_perm(pausing.PAUSE_PERMISSION),
            max_reason=pausing.MAX_REASON,
        )

    def requeue_one(self, request: HttpRequest, pk: int) -> HttpResponse:
        self._require(self.has_requeue_permission(request))
        self._requeue(request, [get_object_or_404(DeadLetter, pk=pk)])
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_change", args=[pk]))

    def discard_one(self, request: HttpRequest, pk: int) -> HttpResponse:
        self._require(self.has_discard_permission(request))
        self.discard(request, [get_object_or_404(DeadLetter, pk=pk)])
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_change", args=[pk]))
