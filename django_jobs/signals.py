"""Signals for each step of a job's life, so error trackers and metrics can hook the custom worker."""

from __future__ import annotations

from django.dispatch import Signal

#: sender=job name; kwargs: job_id, queue.
job_enqueued = Signal()
#: sender=job name; kwargs: job_id, queue, attempt.
job_started = Signal()
#: sender=job name; kwargs: job_id, queue, attempt, duration.
job_succeeded = Signal()
#: sender=job name; kwargs: job_id, queue, attempt, duration, exception (the exception instance).
#: Sent for every failed attempt, wherever its end was decided: ``duration`` is how long it ran, until
#: a hard timeout's or a cancel's kill too, and None when no process of this runjobs ran it (a payload
#: that cannot be read, a lease reaped from another host); a kill's ``exception`` is ``JobTimeout`` or
#: ``WorkerLost``.
job_failed = Signal()
#: sender=job name; kwargs: job_id, queue, attempt, delay (seconds until the next attempt).
job_retrying = Signal()
#: sender=job name; kwargs: job_id, queue, attempt, duration (until its kill, when it was killed).
#: Sent when an attempt ends cancelled: the job raised ``JobCancelled``, its work process was killed
#: after ``JOBS["CANCEL_GRACE"]``, or it failed once its cancel had been requested.
job_cancelled = Signal()
#: sender=job name; kwargs: job_id, queue, attempt, duration, delay (seconds until it runs again).
#: Sent when an attempt snoozed (raised or returned ``Snooze``): the attempt was given back.
job_snoozed = Signal()
#: sender=job name; kwargs: job_id, queue, attempt (0: it never started), expires_at (aware datetime).
#: Sent when a claim dropped the job unrun because it had not started by its expiry.
job_expired = Signal()
#: sender=job name; kwargs: dead_letter (the DeadLetter row).
job_dead_lettered = Signal()
#: sender=job name; kwargs: dead_letter (the DeadLetter row, now requeued), job_id (the new job's id).
#: Sent inside the requeue's transaction, before the new job is delivered: a receiver that raises
#: rolls the requeue back.
job_requeued = Signal()
