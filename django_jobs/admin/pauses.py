"""The queue overview's *Pause* and *Resume* buttons, for a queue or a job type: POST with CSRF only,
behind their own permission (403 without it), recorded in the admin's log with who, what and why.

Thin: :mod:`django_jobs.flow.pausing` does the work, as it does for ``manage.py jobs_pause``.
"""

from __future__ import annotations

from typing import Any, Protocol

from django.contrib import messages
from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from redis.exceptions import RedisError

from django_jobs.exceptions import JobsError
from django_jobs.flow import pausing

#: The kinds of thing the buttons pause, as the form posts them.
KINDS = {"queue": "Queue", "job": "Job type"}


class _Admin(Protocol):
    """What the pause views need of the dead-letter admin they are mixed into."""

    def _require(self, allowed: bool) -> None: ...
    def message_user(self, request: HttpRequest, message: str, level: int = ...) -> None: ...


class PausePages:
    """Mixed into the dead-letter admin, beside the overview the buttons sit on."""

    def pause_view(self: _Admin, request: HttpRequest) -> HttpResponse:
        """POST ``kind`` (queue or job), ``name`` and an optional ``reason``: pause it everywhere."""
        self._require(request.user.has_perm(pausing.PAUSE_PERMISSION))
        kind, name = _posted(request)
        reason = request.POST.get("reason", "").strip()
        try:
            done = pausing.pause(**{kind: name}, reason=reason, actor=request.user)
        except (JobsError, ValueError, RedisError) as exc:
            return _back(self, request, f"{KINDS[kind]} {name} was not paused: {exc}", messages.ERROR)
        said = "is paused: its jobs wait" if done else "was already paused: nothing changed"
        return _back(self, request, f"{KINDS[kind]} {name} {said}.", messages.SUCCESS)

    def resume_view(self: _Admin, request: HttpRequest) -> HttpResponse:
        """POST ``kind`` and ``name``: resume it everywhere; a job type's parked jobs go back in order."""
        self._require(request.user.has_perm(pausing.PAUSE_PERMISSION))
        kind, name = _posted(request)
        try:
            done = pausing.resume(**{kind: name}, actor=request.user)
        except (JobsError, ValueError, RedisError) as exc:
            return _back(self, request, f"{KINDS[kind]} {name} was not resumed: {exc}", messages.ERROR)
        if not done.was_paused and not done.released:
            return _back(
                self, request, f"{KINDS[kind]} {name} was not paused: nothing changed.", messages.INFO
            )
        back = f" {done.released} held job(s) are back at the head of their queue." if kind == "job" else ""
        return _back(self, request, f"{KINDS[kind]} {name} is resumed.{back}", messages.SUCCESS)


def _posted(request: HttpRequest) -> tuple[str, str]:
    """The form's kind and name; anything else is a request no button of ours makes (400)."""
    kind, name = request.POST.get("kind", ""), request.POST.get("name", "")
    if kind not in KINDS or not name:
        raise BadRequest("Pause and resume take kind (queue or job) and name.")
    return kind, name


def _back(admin: Any, request: HttpRequest, message: str, level: int) -> HttpResponse:
    admin.message_user(request, message, level)
    return HttpResponseRedirect(reverse("admin:django_jobs_overview"))
