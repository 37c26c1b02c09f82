"""Long work as a chain of short, resumable jobs: one page per job, a checkpoint in the database.

```python
@chain(name="shop.sync_catalog", timeout=60)
def sync_catalog(cursor, *, since):
    page = api.products(after=cursor, limit=50, since=since)
    for product in page.items:
        Product.objects.update_or_create(sku=product.sku, defaults=...)
    return Page(next_cursor=page.next, items=len(page.items))   # next_cursor None: done

sync_catalog.start(since="2026-01-01")
```

Each page runs inside one transaction with the checkpoint: the page's database writes, the new
cursor and the next page's enqueue (through the outbox) commit together or not at all, so a crash
redoes at most one page. A page runs only if the chain's checkpoint still holds its cursor, taken
under a row lock, so each page is idempotent by (chain id, cursor): a duplicate delivery finds the
checkpoint moved on and does nothing. Cursors are plain JSON values.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from django_jobs.core import payload, registry
from django_jobs.exceptions import Snooze
from django_jobs.models import Chain
from django_jobs.policy import RetryPolicy
from django_jobs.signals import job_dead_lettered

_chain_jobs: set[str] = set()


@dataclass(frozen=True)
class Page:
    """What a page returns: where the next page starts (None when done) and how many items it did."""

    next_cursor: Any
    items: int = 0


PageFunction = Callable[..., Page | Any]


@dataclass(frozen=True)
class ChainJob:
    """A chain's page function together with the job that runs one page."""

    page: registry.Job[[str, Any], None]

    def start(self, **kwargs: Any) -> Chain:
        """Create the chain and queue its first page (on commit, inside a transaction)."""
        payload.encode((), kwargs)  # the same rules as any payload: IDs and plain values
        with transaction.atomic():
            created = Chain.objects.create(name=self.page.name, kwargs=kwargs)
            self.page.enqueue(str(created.pk), None)
        return created


def chain(
    *,
    timeout: float,
    name: str | None = None,
    queue: str = "default",
    retry: RetryPolicy | None = None,
    priority: int = 0,
) -> Callable[[PageFunction], ChainJob]:
    """Register ``func(cursor, **kwargs) -> Page | next_cursor`` as a chain of page jobs; every page
    is queued with ``priority``."""

    def decorate(func: PageFunction) -> ChainJob:
        @functools.wraps(func)
        def page(chain_id: str, cursor: Any) -> None:
            _run_page(func, chain_id, cursor)

        register = registry.job(timeout=timeout, name=name, queue=queue, retry=retry, priority=priority)
        definition = register(page)
        _chain_jobs.add(definition.name)
        return ChainJob(definition)

    return decorate


def _run_page(func: PageFunction, chain_id: str, cursor: Any) -> None:
    try:
        with transaction.atomic():
            current = Chain.objects.select_for_update().filter(pk=chain_id).first()
            live = (Chain.Status.RUNNING, Chain.Status.FAILED)
            if current is None or current.status not in live or current.cursor != cursor:
                return  # paused, cancelled, finished, or a page already checkpointed
            result = func(cursor, **current.kwargs)
            if isinstance(result, Snooze):
                raise result  # as if raised: the page's writes roll back, its cursor runs again later
            page = result if isinstance(result, Page) else Page(result)
            current.cursor = page.next_cursor
            current.pages_done += 1
            current.items_done += page.items
            current.last_error = ""
            current.status = Chain.Status.RUNNING if page.next_cursor is not None else Chain.Status.DONE
            current.finished_at = timezone.now() if current.status == Chain.Status.DONE else None
            current.save()
            if current.status == Chain.Status.RUNNING:
                registry.get(current.name).enqueue(chain_id, page.next_cursor)
    except Snooze:
        raise  # not an error: the page runs again later, from the same checkpoint
    except Exception as exc:
        Chain.objects.filter(pk=chain_id).update(last_error=f"{type(exc).__name__}: {exc}"[:2000])
        raise


def pause(chain_id: uuid.UUID | str) -> bool:
    """Stop after the running page; True if the chain was running."""
    return bool(
        Chain.objects.filter(pk=chain_id, status=Chain.Status.RUNNING).update(status=Chain.Status.PAUSED)
    )


def cancel(chain_id: uuid.UUID | str) -> bool:
    """Stop for good; True if the chain had not finished."""
    live = (Chain.Status.RUNNING, Chain.Status.PAUSED, Chain.Status.FAILED)
    return bool(Chain.objects.filter(pk=chain_id, status__in=live).update(status=Chain.Status.CANCELLED))


def resume(chain_id: uuid.UUID | str) -> bool:
    """Carry on from the checkpoint after a pause or a dead-lettered page; True if it resumed."""
    with transaction.atomic():
        current = Chain.objects.select_for_update().filter(pk=chain_id).first()
        if current is None or current.status not in (Chain.Status.PAUSED, Chain.Status.FAILED):
            return False
        Chain.objects.filter(pk=chain_id).update(status=Chain.Status.RUNNING)
        registry.get(current.name).enqueue(str(chain_id), current.cursor)
        return True


def _on_dead_letter(sender: str, dead_letter: Any, **kwargs: Any) -> None:
    """A page that ran out of attempts marks its chain failed (requeue or resume() carries on)."""
    if sender in _chain_jobs and dead_letter.args:
        Chain.objects.filter(pk=dead_letter.args[0], status=Chain.Status.RUNNING).update(
            status=Chain.Status.FAILED
        )


job_dead_lettered.connect(_on_dead_letter, dispatch_uid="django_jobs.workflows.chains")
