"""Views the test suite drives with Django's test client."""

from django.db import transaction
from django.http import HttpRequest, HttpResponse

from tests.testapp import jobs


def enqueue_record(request: HttpRequest) -> HttpResponse:
    """Enqueue ``tests.record`` (``?job=always_fails`` for the failing one), in a transaction when
    ``?atomic=1``: through the outbox, as a view that writes data and enqueues in one commit does."""
    definition = jobs.always_fails if request.GET.get("job") == "always_fails" else jobs.record
    if request.GET.get("atomic"):
        with transaction.atomic():
            handle = definition.enqueue(request.GET.get("key", "view"))
    else:
        handle = definition.enqueue(request.GET.get("key", "view"))
    return HttpResponse(handle.id)
