"""The admin's job page: any job by id, as its record says now, with the dead letters it links to,
and its two actions, *Cancel* and *Retry now*, each behind its own permission and recorded in the
admin's log like the dead-letter actions.

Arguments and the result are shown only with the payload permission, through the redaction hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from redis.exceptions import RedisError

from django_jobs.conf import jobs_settings
from django_jobs.core import audit, cancellation, results
from django_jobs.exceptions import JobDoesNotExist
from django_jobs.failures import redaction, retrying
from django_jobs.models import BatchMember, DeadLetter, JobHistory
from django_jobs.ops import why
from django_jobs.store import CancelResult, valid_job_id

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
    def message_user(self, request: HttpRequest, message: str, level: int = ...) -> None: ...


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
        """Any job by id: its record in Redis (or its history row, once Redis let it go), why it is
        where it is, the dead letters and batch it links to."""
        self._require(self.has_view_permission(request))
        if not valid_job_id(job_id):
            raise Http404("Not a job id.")
        origin = DeadLetter.objects.filter(requeued_job_id=job_id).only("pk", "job_name", "queue").first()
        died = (
            DeadLetter.objects.filter(job_id=job_id)
            .only("pk", "job_name", "exception", "queue", "status")
            .first()
        )
        state, error = None, ""
        try:
            state = results.get_job(job_id)
        except JobDoesNotExist:
            pass
        except RedisError as exc:
            error = f"Redis did not answer: {exc}"
        payload = self.has_view_payload_permission(request)
        try:
            explained = why.why(job_id, show_key=payload)
        except JobDoesNotExist:
            explained = ""
        member = BatchMember.objects.filter(job_id=job_id).select_related("batch").first()
        past = JobHistory.objects.filter(job_id=job_id).first() if state is None else None
        if not (explained or error or origin or died or member):
            raise Http404(f"No job {job_id} is known: never enqueued, or its record expired.")
        return self._render(
            request,
            "job.html",
            f"Job {job_id}",
            job_id=job_id,
            origin=origin,
            died=died,
            member=member,
            state=state,
            error=error,
            why=explained,
            past=past,
            finished_ttl=jobs_settings.FINISHED_TTL,
            can_cancel=request.user.has_perm(CANCEL_PERMISSION),
            can_retry=request.user.has_perm(RETRY_PERMISSION),
            **_payload(state, payload),
        )

    def cancel_job_view(self: _Admin, request: HttpRequest, job_id: str) -> HttpResponse:
        """POST: cancel the job (a waiting one at once, a running one asked to stop)."""
        self._require(request.user.has_perm(CANCEL_PERMISSION))
        if not valid_job_id(job_id):
            raise Http404("Not a job id.")
        done = cancellation.cancel(job_id)
        _log(request, job_id, f"Cancel: {done.value}")
        self.message_user(request, CANCEL_MESSAGES[done].format(job_id=job_id))
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_job", args=[job_id]))

    def retry_job_view(self: _Admin, request: HttpRequest, job_id: str) -> HttpResponse:
        """POST: run a scheduled job now, or requeue a dead-lettered one from its dead letter."""
        self._require(request.user.has_perm(RETRY_PERMISSION))
        if not valid_job_id(job_id):
            raise Http404("Not a job id.")
        done = retrying.retry_now(job_id, actor=request.user)
        _log(request, job_id, f"Retry now: {done.outcome.value}")
        self.message_user(request, RETRY_MESSAGES[done.outcome].format(job_id=done.job_id))
        return HttpResponseRedirect(reverse("admin:django_jobs_deadletter_job", args=[done.job_id]))


CANCEL_PERMISSION = cancellation.PERMISSION
RETRY_PERMISSION = "django_jobs.retry_job"
CANCEL_MESSAGES = {
    CancelResult.CANCELLED: "Job {job_id} was cancelled: it will not run.",
    CancelResult.REQUESTED: "Job {job_id} is running: it was asked to stop, and is killed after the grace.",
    CancelResult.ALREADY_ENDED: "Job {job_id} had already ended: nothing changed.",
    CancelResult.NOT_FOUND: "Redis holds no job {job_id}: nothing changed.",
}
RETRY_MESSAGES = {
    retrying.RetryOutcome.STARTED: "Job {job_id} is on its queue now.",
    retrying.RetryOutcome.REQUEUED: "The dead letter was requeued as job {job_id}.",
    retrying.RetryOutcome.NOT_WAITING: "Job {job_id} is not waiting to be retried: nothing changed.",
    retrying.RetryOutcome.NOT_FOUND: "No job {job_id} to retry: nothing changed.",
}


def _log(request: HttpRequest, job_id: str, message: str) -> None:
    """The admin log's record of an action on a job, which has no row of its own: who, which job, what."""
    log_many(request, {job_id: message})


def log_many(request: HttpRequest, messages: dict[str, str]) -> None:
    """:func:`_log` of many jobs at once (a bulk action): one INSERT."""
    entries = [audit.Entry(job_id, f"Job {job_id}", text) for job_id, text in messages.items()]
    audit.record(request.user, entries)


def _payload(state: results.JobState | None, allowed: bool) -> dict[str, Any]:
    if state is None or not allowed:
        return {"payload_hidden": state is not None}
    arguments = redaction.shown({"args": state.args, "kwargs": state.kwargs}, state.name)
    result = redaction.shown(state.result, state.name) if state.result is not None else ""
    return {"arguments": arguments, "result": result}
