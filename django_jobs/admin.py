"""The dead-letter admin. Thin: every state change goes through ``deadletter.py``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from . import deadletter
from .exceptions import JobNotFound
from .models import DeadLetter

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[DeadLetter]
else:
    _Base = admin.ModelAdmin


@admin.register(DeadLetter)
class DeadLetterAdmin(_Base):
    list_display = ("job_name", "queue", "exception", "short_message", "attempts", "created_at", "status")
    list_filter = ("status", "reason", "queue", "job_name")
    search_fields = ("job_id", "job_name", "message")
    date_hierarchy = "created_at"
    actions = ["requeue", "discard"]
    readonly_fields = (
        "job_id",
        "job_name",
        "queue",
        "reason",
        "status",
        "attempts",
        "exception",
        "message",
        "payload",
        "traceback_text",
        "history",
        "raw",
        "requeued_job_id",
        "created_at",
        "updated_at",
    )
    fields = readonly_fields
    change_form_template = "admin/django_jobs/deadletter/change_form.html"

    @admin.display(description="message")
    def short_message(self, obj: DeadLetter) -> str:
        return obj.message[:80]

    @admin.display(description="payload")
    def payload(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", json.dumps({"args": obj.args, "kwargs": obj.kwargs}, indent=2))

    @admin.display(description="traceback")
    def traceback_text(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: DeadLetter | None = None) -> bool:
        return False  # rows change only through the actions below

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.requeue_deadletter")

    def has_discard_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.discard_deadletter")

    def _requeue(self, request: HttpRequest, entries: Any) -> None:
        try:
            done = deadletter.requeue(entries, actor=request.user)
        except JobNotFound as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(request, f"Requeued {len(done)} dead letter(s).", messages.SUCCESS)

    @admin.action(description="Requeue selected dead letters", permissions=["requeue"])
    def requeue(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._requeue(request, queryset.filter(status=DeadLetter.Status.OPEN))

    @admin.action(description="Discard selected dead letters", permissions=["discard"])
    def discard(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        count = deadletter.discard(queryset, actor=request.user)
        self.message_user(request, f"Discarded {count} dead letter(s).", messages.SUCCESS)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django silently ignores an action the user may not run; an operator deserves a 403.
        action = request.POST.get("action") if request.method == "POST" else None
        checks = {"requeue": self.has_requeue_permission, "discard": self.has_discard_permission}
        if action in checks and not checks[action](request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(require_POST(self.requeue_one))
        return [path("<int:pk>/requeue/", view, name="django_jobs_deadletter_requeue"), *super().get_urls()]

    def requeue_one(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_requeue_permission(request):
            raise PermissionDenied
        self._requeue(request, DeadLetter.objects.filter(pk=pk))
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_change", args=[pk]))
