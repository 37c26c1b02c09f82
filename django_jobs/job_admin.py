"""The admin's job page: any job by id, as its record says now, with the dead letters it links to.

Arguments and the result are shown only with the payload permission, through the redaction hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from redis.exceptions import RedisError

from . import redaction, results
from .conf import jobs_settings
from .exceptions import JobDoesNotExist
from .models import DeadLetter, OutboxEntry
from .store import valid_job_id

if TYPE_CHECKING:
    from django.template.response import TemplateResponse


class _Admin(Protocol):
    """What the job pages need of the dead-letter admin they are mixed into."""

    def _require(self, allowed: bool) -> None: ...
    def _render(
        self, request: HttpRequest, template: str, title: str, **context: Any
    ) -> TemplateResponse: ...
    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...
    def has_view_payload_permission(self, request: HttpRequest) -> bool: ...


class JobPages:
    """Mixed into the dead-letter admin, whose permissions and page frame the job pages share."""

    def find_job_view(self: _Admin, request: HttpRequest) -> HttpResponse:
        """The "find a job" box: ``?id=`` → that job's page."""
        self._require(self.has_view_permission(request))
        job_id = request.GET.get("id", "").strip()
        if not valid_job_id(job_id):
            raise Http404("A job id is letters, digits, _ and -, 1 to 64 of them.")
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_job", args=[job_id]))

    def job_view(self: _Admin, request: HttpRequest, job_id: str) -> HttpResponse:
        """Any job by id: its record in Redis, its outbox row, the dead letters it links to."""
        self._require(self.has_view_permission(request))
        if not valid_job_id(job_id):
            raise Http404("Not a job id.")
        origin = DeadLetter.objects.filter(requeued_job_id=job_id).only("pk", "job_name", "queue").first()
        died = DeadLetter.objects.filter(job_id=job_id).only("pk", "job_name", "exception", "queue").first()
        state, error = None, ""
        try:
            state = results.get_job(job_id)
        except JobDoesNotExist:
            pass
        except RedisError as exc:
            error = f"Redis did not answer: {exc}"
        in_outbox = OutboxEntry.objects.filter(pk=job_id).exists()
        if state is None and not (error or in_outbox or origin or died):
            raise Http404(f"No job {job_id} is known: never enqueued, or its record expired.")
        return self._render(
            request,
            "job.html",
            f"Job {job_id}",
            job_id=job_id,
            origin=origin,
            died=died,
            state=state,
            error=error,
            in_outbox=in_outbox,
            finished_ttl=jobs_settings.FINISHED_TTL,
            **_payload(state, self.has_view_payload_permission(request)),
        )


def _payload(state: results.JobState | None, allowed: bool) -> dict[str, Any]:
    if state is None or not allowed:
        return {"payload_hidden": state is not None}
    arguments = redaction.shown({"args": state.args, "kwargs": state.kwargs}, state.name)
    result = redaction.shown(state.result, state.name) if state.result is not None else ""
    return {"arguments": arguments, "result": result}
