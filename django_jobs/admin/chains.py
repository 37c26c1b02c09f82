"""The chains' admin: each chain's progress, its last error and its dead letters; pause, resume, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from django_jobs.models import Chain
from django_jobs.templatetags.django_jobs_admin import dotted, when
from django_jobs.workflows import chains

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[Chain]
else:
    _Base = admin.ModelAdmin


@admin.register(Chain)
class ChainAdmin(_Base):
    # Few, narrow columns: the list fits 1280 px with the admin's sidebar and filters open (the full
    # id, kwargs, cursor and error are on each chain's page).
    list_display = ("chain", "status", "progress", "short_error", "updated")
    list_display_links = ("chain",)
    list_filter = ("status", "name")
    search_fields = ("id", "name")
    readonly_fields = ("id", "name", "status", "kwargs", "cursor", "pages_done", "items_done", "rate",
                       "last_error", "created_at", "updated_at", "finished_at", "dead_letters")  # fmt: skip
    fields = readonly_fields
    actions = ["pause", "resume", "cancel"]

    @admin.display(description="chain", ordering="name")
    def chain(self, obj: Chain) -> str:
        return format_html("<strong>{}</strong><br><small>{}…</small>", dotted(obj.name), str(obj.pk)[:8])

    @admin.display(description="error")
    def short_error(self, obj: Chain) -> str:
        error = dotted(obj.last_error[:60] + ("…" if len(obj.last_error) > 60 else ""))
        return format_html("{}<br><small>{}</small>", error, self.dead_letters(obj))

    @admin.display(description="progress")
    def progress(self, obj: Chain) -> str:
        return format_html(
            "{}&nbsp;pages, {}&nbsp;items<br><small>{}&nbsp;items/s</small>",
            f"{obj.pages_done:,}",
            f"{obj.items_done:,}",
            self.rate(obj),
        )

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Chain) -> str:
        return when(obj.updated_at)

    @admin.display(description="items/s")
    def rate(self, obj: Chain) -> str:
        elapsed = ((obj.finished_at or timezone.now()) - obj.created_at).total_seconds()
        return f"{obj.items_done / elapsed:.1f}" if elapsed > 0 else "-"

    @admin.display(description="dead letters")
    def dead_letters(self, obj: Chain) -> str:
        query = urlencode({"job_name": obj.name, "q": str(obj.pk)})
        return format_html(
            '<a href="{}?{}">dead letters</a>', reverse("admin:django_jobs_deadletter_changelist"), query
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # chains start from code: job.start(...)

    def has_change_permission(self, request: HttpRequest, obj: Chain | None = None) -> bool:
        return False  # every field is read-only: a "View chain" page without Save buttons

    def has_manage_permission(self, request: HttpRequest) -> bool:
        """Pausing, resuming and cancelling a chain needs Django's "Can change chain" permission."""
        return request.user.has_perm(f"{self.opts.app_label}.change_chain")

    def _act(self, request: HttpRequest, queryset: QuerySet[Chain], verb: str) -> None:
        action, done = {"pause": (chains.pause, "Paused"), "resume": (chains.resume, "Resumed"),
                        "cancel": (chains.cancel, "Cancelled")}[verb]  # fmt: skip
        changed = [chain for chain in queryset if action(chain.pk)]
        for chain in changed:
            self.log_change(request, chain, f"{done} the chain")
        self.message_user(request, f"{done} {len(changed)} chain(s).", messages.SUCCESS)

    @admin.action(description="Pause selected chains", permissions=["manage"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        self._act(request, queryset, "pause")

    @admin.action(description="Resume selected chains", permissions=["manage"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        self._act(request, queryset, "resume")

    @admin.action(description="Cancel selected chains", permissions=["manage"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        self._act(request, queryset, "cancel")
