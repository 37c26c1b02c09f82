"""What must not be lost, or must be queried, lives in the database."""

from __future__ import annotations

import uuid
from collections.abc import Collection

from django.db import connections, models, router
from django.utils import timezone


class OutboxFields(models.Model):
    """The columns every outbox row has, written by every version of this app."""

    id = models.CharField(primary_key=True, max_length=64, editable=False)
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    data = models.TextField(help_text="The JSON payload, exactly as it goes to Redis.")
    timeout = models.PositiveIntegerField()
    due = models.FloatField(default=0, help_text="Unix time the job becomes due; 0 means now.")
    options = models.JSONField(default=dict, blank=True, help_text="unique_key, debounce, cron_run.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.job_name} {self.id}"


class OutboxEntry(OutboxFields):
    """A job written in the same transaction as the data it depends on, waiting to reach Redis.

    The on-commit push delivers it at once; the relay in ``runjobs`` delivers what that push
    missed (Redis down, process killed) and prunes delivered rows in bulk.
    """

    # db_default: rows written by code that predates the column (a rolling deploy) still insert.
    priority = models.SmallIntegerField(default=0, db_default=0, help_text="Higher starts first.")
    trace = models.TextField(
        default="", db_default="", blank=True, help_text="The enqueuer's trace context, if it had one."
    )
    expires = models.FloatField(
        default=0, db_default=0, help_text="Unix time after which the job is dropped unrun; 0 means never."
    )
    batch = models.CharField(
        max_length=36, default="", db_default="", blank=True, help_text="The batch the job is a member of."
    )
    limit_key = models.CharField(
        max_length=100, default="", db_default="", blank=True, help_text="The key its limits count under."
    )
    pushed_to = models.CharField(
        max_length=64,
        default="",
        db_default="",
        blank=True,
        help_text="The run_id of the Redis server it was pushed to, unconfirmed by replicas.",
    )

    class Meta:
        verbose_name = "outbox entry"
        verbose_name_plural = "outbox entries"


def outbox_aliases() -> list[str]:
    """The databases that hold an outbox table."""
    return [alias for alias in connections if router.allow_migrate_model(alias, OutboxEntry)]


def forget_ended(job_ids: Collection[str]) -> None:
    """Delete the outbox rows of jobs that ended before they ran, from every outbox: a row left
    behind is one the relay or the ledger sweep pushes again once Redis has lost the job's end."""
    for alias in outbox_aliases():
        OutboxEntry.objects.using(alias).filter(pk__in=list(job_ids)).delete()


class PlainOutboxEntry(OutboxFields):
    """An outbox row whose other columns hold their database defaults, as most rows do, written
    with the columns of :class:`OutboxFields` alone: a bulk INSERT costs the ORM per column and row
    (about as much as the rest of an enqueue for those five columns). Only ever inserted."""

    class Meta:
        managed = False
        db_table = "django_jobs_outboxentry"
        default_permissions = ()


class Job(models.Model):
    """The admin's job browser, which has no table: jobs live in Redis, in their lifecycle's
    structures, and the browser reads them there (``ops.browse``). Its entry in the admin index is
    this model's; viewing it takes the dead letters' view permission, as the job page does."""

    id = models.CharField(primary_key=True, max_length=64)

    class Meta:
        managed = False
        default_permissions = ()
        verbose_name = "job"
        verbose_name_plural = "jobs"

    def __str__(self) -> str:
        return f"job {self.id}"


class JobHistory(models.Model):
    """A job that ended (succeeded, dead-lettered, cancelled or expired), kept after Redis lets its
    record go (``FINISHED_TTL``) for ``JOBS["HISTORY_RETENTION"]`` seconds: the browser's history.

    Written in bulk, off the hot path: each process buffers the rows of the jobs it ended and writes
    them every few seconds (``telemetry.history``); maintenance deletes expired rows in batches.
    Rows are written in about the order their jobs ended, so the id orders them (newest first: the
    largest ids) and the oldest are the first ids: three indexes (id, job id, queue and id), the least
    a row's INSERT can keep.
    """

    job_id = models.CharField(max_length=64)
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    state = models.CharField(max_length=20, help_text="Its ended state, as `manage.py jobs` names states.")
    attempts = models.PositiveIntegerField(default=0)
    duration = models.FloatField(null=True, blank=True, help_text="Seconds its last attempt ran, if it ran.")
    enqueued_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField()
    worker = models.CharField(max_length=200, blank=True)
    errors = models.JSONField(default=list, blank=True, help_text="One entry per failed attempt.")
    data = models.TextField(blank=True, help_text="The JSON payload: shown with the payload permission only.")

    class Meta:
        verbose_name = "finished job"
        verbose_name_plural = "history"
        default_permissions = ()
        # Meta indexes, not db_index=True, which on PostgreSQL adds a second (LIKE) index to every INSERT;
        # not unique: a job ends once (its attempts' ends are fenced), and a unique check costs each row
        indexes = [
            models.Index(fields=["job_id"], name="djjobs_history_job"),
            models.Index(fields=["queue", "-id"], name="djjobs_history_listing"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} {self.job_id}"


class IdempotencyKey(models.Model):
    """A side effect that has happened. The unique key is the guard: a second claim inserts nothing."""

    key = models.CharField(max_length=255, unique=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.key


class DeadLetterQuerySet(models.QuerySet["DeadLetter"]):
    def open(self) -> DeadLetterQuerySet:
        return self.filter(status=DeadLetter.Status.OPEN)

    def quarantined(self) -> DeadLetterQuerySet:
        """Items the worker's loops set aside (reason ``unreadable``) and jobs whose hash vanished
        (``vanished``): each one is something in Redis that no job run explains. Count them per
        reason with ``.open().quarantined().values("reason").annotate(n=Count("pk"))``."""
        return self.filter(reason__in=(DeadLetter.Reason.UNREADABLE, DeadLetter.Reason.VANISHED))


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
        UNREADABLE = "unreadable", "unreadable item"
        """Something a worker loop read from Redis (an id, a lease, a field) could not be handled;
        it was quarantined here with its raw data instead of blocking the loop."""
        VANISHED = "vanished", "vanished from Redis"
        """The job's id was in a queue, a lease, the scheduled or the dying set, but its hash was gone
        (eviction, a deleted key); nothing more can run."""
        SNOOZED = "snoozed", "snoozed too often"
        """The job snoozed more often than its max_snoozes (JOBS["MAX_SNOOZES"]) allows."""
        FOREIGN = "foreign worker", "taken by a foreign worker"
        """A foreign worker (an rqworker left on a django_jobs queue) took the job and failed it:
        nothing of the job's code ran. Requeue it once that worker is stopped."""

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
    raised_at = models.CharField(
        max_length=300, blank=True, help_text="The frame that raised: file and function, no line number."
    )
    fingerprint = models.CharField(
        max_length=16, blank=True, help_text="Job name, exception class and raising frame, hashed."
    )
    attempts = models.PositiveIntegerField()
    history = models.JSONField(default=list, blank=True, help_text="One entry per failed attempt.")
    reason = models.CharField(max_length=20, choices=Reason.choices)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    requeued_job_id = models.CharField(max_length=64, blank=True, db_index=True)
    requeued_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="later_failures",
        help_text="The entry whose requeue produced the job that failed again here.",
    )
    first_failed_at = models.DateTimeField(default=timezone.now, help_text="When the first attempt failed.")
    created_at = models.DateTimeField(
        default=timezone.now, db_index=True, help_text="When the last attempt failed and the job died."
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = DeadLetterQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        # The admin's filters, grouping and default "open, newest first" view stay index-backed.
        indexes = [
            models.Index(fields=["status", "-created_at"], name="djjobs_dl_status_created"),
            models.Index(fields=["exception"], name="djjobs_dl_exception"),
            models.Index(fields=["fingerprint"], name="djjobs_dl_fingerprint"),
            models.Index(fields=["queue"], name="djjobs_dl_queue"),
            models.Index(fields=["reason", "status"], name="djjobs_dl_reason_status"),
        ]
        permissions = [
            ("view_deadletter_payload", "Can view dead-letter payloads"),
            ("requeue_deadletter", "Can requeue dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
            ("view_queue_overview", "Can view the queue overview"),
            ("cancel_job", "Can cancel jobs"),
            ("retry_job", "Can retry jobs now"),
            ("pause_queue", "Can pause and resume queues and job types"),
        ]

    def __str__(self) -> str:
        return f"{self.job_name} ({self.exception})"


class CronRun(models.Model):
    """One period of a periodic job. Unique on (name, period): the database's guard against a
    double fire, behind the Redis lock, so even a Redis failover cannot fire a period twice."""

    name = models.CharField(max_length=200)
    scheduled_for = models.DateTimeField()
    job_id = models.CharField(max_length=64)
    deadline = models.DateTimeField(help_text="When the run should have finished: the next period's start.")
    finished_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "scheduled_for"], name="django_jobs_cronrun_once")
        ]
        indexes = [models.Index(fields=["finished_at", "deadline"], name="django_jobs_cronrun_overdue")]
        get_latest_by = "scheduled_for"

    def __str__(self) -> str:
        return f"{self.name} @ {self.scheduled_for.isoformat()}"


class Chain(models.Model):
    """Long work split into pages: the checkpoint of a chain of short, resumable jobs."""

    class Status(models.TextChoices):
        RUNNING = "running", "running"
        """A page is queued or running; each page enqueues the next on commit."""
        PAUSED = "paused", "paused"
        """The running page finishes; no next page is queued until resume()."""
        CANCELLED = "cancelled", "cancelled"
        """Stopped for good."""
        DONE = "done", "done"
        """The last page returned no next cursor."""
        FAILED = "failed", "failed"
        """A page was dead-lettered; requeueing it (or resume()) carries on from the checkpoint."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, db_index=True)
    kwargs = models.JSONField(default=dict, blank=True)
    cursor = models.JSONField(
        null=True, blank=True, help_text="Where the next page starts; null at the start."
    )
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING, db_index=True)
    pages_done = models.PositiveIntegerField(default=0)
    items_done = models.PositiveBigIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} {self.id}"


class Batch(models.Model):
    """Jobs enqueued together, whose callbacks run once every one of them has ended.

    Written in the same transaction as its members' outbox rows: a rolled-back batch never exists,
    a committed one is never lost. Its counters move only by conditional UPDATEs (see ``batches``).
    """

    class Status(models.TextChoices):
        OPEN = "open", "open"
        """Some member has not ended yet."""
        SUCCEEDED = "succeeded", "succeeded"
        """Every member succeeded: both callbacks were enqueued."""
        FAILED = "failed", "failed"
        """Every member ended, at least one without success: only ``on_complete`` was enqueued."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200, blank=True, help_text="A label for the admin.")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN)
    total = models.PositiveIntegerField(default=0, help_text="Members enqueued in the batch's block.")
    succeeded = models.PositiveIntegerField(default=0)
    ended = models.PositiveIntegerField(default=0, help_text="Members that ended without success.")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When its last member ended.")

    class Meta:
        verbose_name_plural = "batches"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "-created_at"], name="djjobs_batch_status_created")]

    def __str__(self) -> str:
        return f"{self.name or 'batch'} {self.id}"

    @property
    def pending(self) -> int:
        """Members that have not ended yet."""
        return max(self.total - self.succeeded - self.ended, 0)


class BatchMember(models.Model):
    """One job of a batch. It leaves ``pending`` once, by a conditional UPDATE, however often its
    job runs; a dead-lettered member that is requeued before the batch fired is pending again, as
    the requeued job."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        """Its job has not ended yet (queued, running, retrying, or waiting in the outbox)."""
        SUCCEEDED = "succeeded", "succeeded"
        """Its job succeeded."""
        ENDED = "ended", "ended"
        """Its job ended without success; ``reason`` says how."""

    class Reason(models.TextChoices):
        DEAD_LETTERED = "dead-lettered", "dead-lettered"
        """Its job failed for good; a requeue of its dead letter before the batch fires makes it pending."""
        CANCELLED = "cancelled", "cancelled"
        """Its job was cancelled, dropped unrun at its expiry, or replaced by a debounced enqueue."""
        EXPIRED = "expired", "expired"
        """Its job is gone from Redis without a trace: never pushed (a unique duplicate), evicted, or
        its record expired before any runjobs saw how it ended."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="members")
    job_id = models.CharField(max_length=64, unique=True)
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=20, choices=Reason.choices, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The sweep reads pending members in id order: O(pending), never O(history).
        indexes = [models.Index(fields=["state", "id"], name="djjobs_member_state")]

    def __str__(self) -> str:
        return f"{self.job_name} {self.job_id}"


class BatchCallback(models.Model):
    """A batch's ``on_success`` or ``on_complete`` job: enqueued once, when the batch fires, and
    marked run in the transaction its code runs in, so a second delivery of it does nothing."""

    class Kind(models.TextChoices):
        SUCCESS = "success", "on_success"
        """Runs if every member succeeded."""
        COMPLETE = "complete", "on_complete"
        """Runs once every member ended, however."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        """The batch has members that have not ended."""
        ENQUEUED = "enqueued", "enqueued"
        """The batch fired: the callback's job is on its queue (or retrying, or dead-lettered)."""
        RAN = "ran", "ran"
        """Its code returned and its transaction committed."""
        SKIPPED = "skipped", "skipped"
        """``on_success`` of a batch a member of which did not succeed: it never runs."""

    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="callbacks")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    job_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100)
    args = models.JSONField(default=list, blank=True, help_text="Encoded, after the batch.")
    kwargs = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    job_id = models.CharField(max_length=64, blank=True, help_text="The job enqueued, then the one that ran.")
    enqueued_at = models.DateTimeField(null=True, blank=True)
    ran_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["batch", "kind"], name="djjobs_batch_callback_once")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.job_name}"
