"""The batches' admin: each batch's progress (members pending, succeeded, ended) and its callbacks'
state; on a batch's page, the members that have not succeeded, with links to their jobs and dead
letters. Read-only but for *Reconcile now*, which settles at once what the sweep would settle later."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from django_jobs.models import Batch, BatchMember, DeadLetter
from django_jobs.templatetags.django_jobs_admin import when
from django_jobs.workflows import batches

if TYPE_CHECKING:
    _Base = admin.ModelAdmin[Batch]
else:
    _Base = admin.ModelAdmin

#: Members a batch's page lists (those that have not succeeded, pending first).
MEMBERS_SHOWN = 200


def _job_link(job_id: str) -> str:
    if not job_id:
        return "-"
    return format_html(
        '<a href="{}">{}</a>', reverse("admin:django_jobs_deadletter_job", args=[job_id]), job_id
    )


@admin.register(Batch)
class BatchAdmin(_Base):
    list_display = ("__str__", "status", "progress", "callback_states", "created", "finished")
    list_filter = ("status",)
    search_fields = ("id", "name")
    readonly_fields = ("id", "name", "status", "progress", "created", "finished", "callbacks_table",
                       "members_table")  # fmt: skip
    fields = readonly_fields
    actions = ["reconcile"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        return super().get_queryset(request).prefetch_related("callbacks")  # one query per page, not per row

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # batches start from code: with batch(...)

    def has_change_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False  # every field is read-only: a "View batch" page without Save buttons

    def has_reconcile_permission(self, request: HttpRequest) -> bool:
        """*Reconcile now* needs Django's "Can change batch" permission."""
        return request.user.has_perm(f"{self.opts.app_label}.change_batch")

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django silently ignores an action the user may not run; an operator deserves a 403.
        posted = request.POST.get("action", "") if request.method == "POST" else ""
        if posted and posted not in self.get_actions(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Batch) -> str:
        return when(obj.created_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, obj: Batch) -> str:
        return when(obj.finished_at)

    @admin.display(description="progress")
    def progress(self, obj: Batch) -> str:
        done = obj.succeeded + obj.ended
        return format_html(
            '<progress max="{}" value="{}"></progress> {} / {}<br>'
            "{} succeeded · {} ended · {} pending",
            max(obj.total, 1), done, done, obj.total, obj.succeeded, obj.ended, obj.pending,
        )  # fmt: skip

    @admin.display(description="callbacks")
    def callback_states(self, obj: Batch) -> str:
        ordered = sorted(obj.callbacks.all(), key=lambda c: c.kind, reverse=True)  # on_success first
        shown = [(c.get_kind_display(), c.state) for c in ordered]
        return format_html_join(", ", "{}: {}", shown) if shown else "-"

    @admin.display(description="callbacks")
    def callbacks_table(self, obj: Batch) -> str:
        rows = [
            (
                c.get_kind_display(),
                c.job_name,
                c.state,
                _job_link(c.job_id),
                when(c.enqueued_at),
                when(c.ran_at),
            )
            for c in obj.callbacks.order_by("-kind")
        ]
        if not rows:
            return "-"
        return format_html(
            '<table class="djjobs-table" id="batch-callbacks"><thead><tr><th>callback</th><th>job</th>'
            "<th>state</th><th>job id</th><th>enqueued</th><th>ran</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            format_html_join("", "<tr>" + "<td>{}</td>" * 6 + "</tr>", rows),
        )

    @admin.display(description="members that have not succeeded")
    def members_table(self, obj: Batch) -> str:
        members = list(obj.members.exclude(state=BatchMember.State.SUCCEEDED).order_by("-state", "pk")
                       [:MEMBERS_SHOWN])  # fmt: skip
        dead = dict(
            DeadLetter.objects.filter(job_id__in=[m.job_id for m in members]).values_list("job_id", "pk")
        )
        rows = [
            (_job_link(m.job_id), m.job_name, m.queue, m.state, m.reason or "-", when(m.ended_at),
             self._dead_letter_link(dead.get(m.job_id)))
            for m in members
        ]  # fmt: skip
        if not rows:
            return "-"
        more = obj.total - obj.succeeded - len(rows)
        return format_html(
            '<table class="djjobs-table" id="batch-members"><thead><tr><th>job id</th><th>job</th>'
            "<th>queue</th><th>state</th><th>reason</th><th>ended</th><th>dead letter</th></tr></thead>"
            "<tbody>{}</tbody></table>{}",
            format_html_join("", "<tr>" + "<td>{}</td>" * 7 + "</tr>", rows),
            f"and {more} more" if more > 0 else "",
        )

    @staticmethod
    def _dead_letter_link(pk: int | None) -> str:
        if pk is None:
            return "-"
        url = reverse("admin:django_jobs_deadletter_change", args=[pk])
        return format_html('<a href="{}">dead letter {}</a>', url, pk)

    @admin.action(
        description="Reconcile now: settle members whose jobs have ended", permissions=["reconcile"]
    )
    def reconcile(self, request: HttpRequest, queryset: QuerySet[Batch]) -> None:
        chosen = list(queryset.filter(status=Batch.Status.OPEN))
        moved = batches.reconcile([b.pk for b in chosen]) if chosen else 0
        for chosen_batch in chosen:
            self.log_change(request, chosen_batch, "Reconciled the batch with Redis")
        self.message_user(
            request, f"Reconciled {len(chosen)} open batch(es): {moved} member(s) settled.", messages.SUCCESS
        )
