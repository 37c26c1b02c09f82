"""One member of LOST, DYING or VANISHED at a time, so that whatever it holds it neither stops a scan
nor stays at its head: handled, or moved behind the others to be retried, or (unreadable, or the
same failure twice) quarantined as a dead letter with its raw data, then removed."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from django_jobs.conf import jobs_settings
from django_jobs.failures import deadletter
from django_jobs.models import DeadLetter
from django_jobs.store import to_text, valid_job_id
from django_jobs.worker.duties.base import Scope, Unreadable, exc_path, guarded, transient

logger = logging.getLogger("django_jobs.worker")

#: Seconds an item that failed waits before it is looked at again (it goes behind the others).
RETRY_SECONDS = 5.0


def dying_age() -> float:
    """Past three leases, whoever was writing a dead job's row is gone (or the database was down)."""
    return 3 * jobs_settings.LEASE_SECONDS


def raw_id(member: bytes, token: bool) -> bytes:
    """The job id inside a member of LOST (a ``token``: ``<id>:<nonce>``) or DYING (the id itself)."""
    return member.rpartition(b":")[0] if token else member


def decoded(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise Unreadable(f"The {what} is not UTF-8.") from None


def job_id(raw: bytes) -> str:
    """The id as text, if it is one django_jobs could have made; otherwise the item is unreadable."""
    text = decoded(raw, "job id")
    if not valid_job_id(text):
        raise Unreadable("The job id breaks the id rule: letters, digits, _ and -, at most 64 characters.")
    return text


class Items:
    """Handles members of one of the sets for the duties of ``scope``."""

    def __init__(self, scope: Scope) -> None:
        self.scope, self.store, self.strikes = scope, scope.store, scope.strikes

    def _retry_after(self, key: str) -> float:
        """The score offset that brings a failed item back in ``RETRY_SECONDS``, behind the others.

        A DYING member is looked at only once it is older than :func:`dying_age`."""
        return RETRY_SECONDS - (dying_age() if key == self.store.keys.dying else 0.0)

    def handle(self, key: str, member: bytes, handle: Callable[[bytes], None]) -> None:
        """Handle one member so that, whatever it holds, it neither stops the scan nor stays at its head."""
        try:
            handle(member)
        except Unreadable as exc:
            self.or_defer(key, member, partial(self._quarantine, key, member, exc))
        except Exception as exc:
            self.or_defer(key, member, partial(self._failed, key, member, exc))
        else:
            self.strikes.forget((key, member))

    def or_defer(self, key: str, member: bytes, action: Callable[[], None]) -> None:
        """Run ``action``; if even that fails (a service down), the item waits behind the others."""
        try:
            action()
        except Exception as exc:
            logger.warning(
                "%s item %r kept for later (%s)", key, member[:200], exc, exc_info=not transient(exc)
            )
            guarded(f"deferring {key} item", partial(self.store.defer, key, member, self._retry_after(key)))

    def _failed(self, key: str, member: bytes, exc: Exception) -> None:
        """A service down: retry later. The same failure twice: the item itself is the problem."""
        if not transient(exc) and self.strikes.second((key, member), exc):
            self._quarantine(key, member, exc)
            return
        logger.warning(
            "%s item %r failed (%s: %s); it waits behind the others and is retried.",
            key,
            member[:200],
            exc_path(exc),
            exc,
            exc_info=not transient(exc),
        )
        self.store.defer(key, member, self._retry_after(key))

    def _quarantine(self, key: str, member: bytes, exc: Exception) -> None:
        """Write the item's dead letter (reason from ``exc``), then remove it from ``key``."""
        raw = raw_id(member, token=key == self.store.keys.lost)
        record = self.store.record(raw)
        failure = deadletter.Failure(
            job_id=to_text(raw or member),  # an id that breaks the rule is filed under a surrogate
            queue=record.queue,
            reason=getattr(exc, "reason", DeadLetter.Reason.UNREADABLE),
            exception=exc_path(exc),
            message=str(exc),
        )
        deadletter.quarantine(failure, record.snapshot, source=key, member=member)
        self.store.settled(key, member, raw, jobs_settings.FINISHED_TTL, record.queue)
        self.strikes.forget((key, member))
