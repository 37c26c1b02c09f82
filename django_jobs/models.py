"""What must not be lost, or must be queried, lives in the database."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class OutboxEntry(models.Model):
    """A job written in the same transaction as the data it depends on, waiting to reach Redis.

    The on-commit push delivers it at once; the relay in ``runjobs`` delivers what that push
    missed (Redis down, process killed) and prunes delivered rows in bulk.
    """

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    data = models.TextField(help_text="The JSON payload, exactly as it goes to Redis.")
    timeout = models.PositiveIntegerField()
    due = models.FloatField(default=0, help_text="Unix time the job becomes due; 0 means now.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"

    def __str__(self) -> str:
        return f"{self.job_name} {self.id}"


class IdempotencyKey(models.Model):
    """A side effect that has happened. The unique key is the guard: a second claim inserts nothing."""

    key = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.key


class DeadLetterQuerySet(models.QuerySet["DeadLetter"]):
    def open(self) -> DeadLetterQuerySet:
        return self.filter(status=DeadLetter.Status.OPEN)

    def for_job(self, name: str) -> DeadLetterQuerySet:
        return self.filter(job_name=name)


class DeadLetter(models.Model):
    """A job that will not be retried any more: the durable record an operator acts on."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        """Waiting for an operator."""
        REQUEUED = "requeued", "requeued"
        """Sent back to its queue as a new job with fresh attempts."""
        DISCARDED = "discarded", "discarded"
        """Looked at and deliberately dropped; the row stays for the record."""

    class Reason(models.TextChoices):
        PERMANENT = "permanent", "permanent error"
        """The job raised PermanentError or an exception listed in permanent=."""
        EXHAUSTED = "exhausted", "attempts exhausted"
        """Every attempt the retry policy allows failed."""
        WORKER_LOST = "worker lost", "worker lost"
        """The process running the job died on its last attempt."""
        UNREGISTERED = "unregistered", "unregistered job"
        """No @job in the worker has this name; nothing was run."""
        UNDECODABLE = "undecodable", "undecodable payload"
        """The job hash or its payload is not valid django_jobs data; nothing was run."""

    job_id = models.CharField(max_length=64, unique=True)
    job_name = models.CharField(max_length=200, db_index=True)
    queue = models.CharField(max_length=100)
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    raw = models.TextField(
        blank=True, help_text="The job hash as found in Redis, for payloads that did not decode."
    )
    exception = models.CharField(max_length=300)
    message = models.TextField(blank=True)
    traceback = models.TextField(blank=True)
    attempts = models.PositiveIntegerField()
    history = models.JSONField(default=list, blank=True, help_text="One entry per failed attempt.")
    reason = models.CharField(max_length=20, choices=Reason.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN, db_index=True)
    requeued_job_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DeadLetterQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("requeue_deadletter", "Can requeue dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} ({self.exception})"
