"""The shop's background jobs, one per behaviour django_jobs is built for.

* ``shop.send_invoice``: a side effect that must happen once, however often the job is delivered.
* ``shop.sync_inventory``: a flaky upstream; the job fails twice, is retried with backoff, then succeeds.
* ``shop.charge_card``: an error that retrying cannot fix; the job is dead-lettered on its first attempt.
* ``shop.notify_partner``: a partner API that allows 2 calls at once and 5 per second, whatever the
  number of workers.
* ``shop.nightly_report``: a periodic job that fires once a night, however many workers schedule it.
* ``shop.export_orders``: long work split into a chain of short, resumable pages.
* ``shop.send_invoice_unguarded``: ``send_invoice`` as first written, kept to show what
  ``manage.py jobs_verify`` finds: a second delivery mails again. Never enqueued.

Each job takes primary keys (plain JSON values) and reads the rows itself, so it always sees
committed data as it is when the job runs, not as it was at enqueue.
"""

from __future__ import annotations

import datetime
import logging
from decimal import Decimal

from django.core.mail import send_mail
from django.db.models import F
from django.utils import timezone

from django_jobs import RetryPolicy, idempotent, job
from django_jobs.workflows.chains import Page, chain

from .models import InventorySync, Order

logger = logging.getLogger(__name__)

#: How many attempts of the inventory sync fail before the "warehouse" answers.
FLAKY_ATTEMPTS = 2
#: Short waits (up to 1 s, then 2 s, ...) so the demo shows its retries within seconds.
INVENTORY_RETRY = RetryPolicy(max_attempts=5, base=1.0, factor=2.0, max_delay=10.0)
#: The stand-in payment provider declines any charge above this amount.
CARD_LIMIT = Decimal("500.00")


class CardDeclined(Exception):
    """The card issuer refused the charge: the same charge retried would be refused again."""


def an_order() -> dict[str, int]:
    """An example payload for ``manage.py jobs_verify``: a new order in its test database."""
    order = Order.objects.create(customer_email="ada@example.com", total=Decimal("42.00"))
    return {"order_id": order.pk}


@job(name="shop.send_invoice_unguarded", queue="emails", timeout=30, examples=[an_order])
def send_invoice_unguarded(order_id: int) -> None:
    """The flawed version of :func:`send_invoice`: it mails, then marks the order. Delivered twice (or
    retried after a crash past the mail), it mails twice; ``manage.py jobs_verify`` says so."""
    order = Order.objects.get(pk=order_id)
    send_mail(f"Your invoice for order #{order.pk}", "Thank you.", None, [order.customer_email])
    order.invoice_sent = True
    order.save(update_fields=["invoice_sent"])


@job(
    name="shop.send_invoice", queue="emails", timeout=30, permanent=(Order.DoesNotExist,), examples=[an_order]
)
def send_invoice(order_id: int) -> None:
    """Mail the invoice at most once per order.

    The idempotency key and ``invoice_sent`` commit together; if the mail raises, both roll
    back and the retry sends it. A duplicate delivery finds the key and does nothing.
    """
    with idempotent(f"send_invoice:{order_id}") as first:
        if not first:
            logger.info("Invoice for order %s was already sent; skipping the duplicate.", order_id)
            return
        order = Order.objects.get(pk=order_id)
        order.invoice_sent = True
        order.save(update_fields=["invoice_sent"])
        send_mail(
            subject=f"Your invoice for order #{order.pk}",
            message=f"Thank you for your order. Total: {order.total}.",
            from_email=None,
            recipient_list=[order.customer_email],
        )


@job(name="shop.sync_inventory", timeout=60, retry=INVENTORY_RETRY, permanent=(InventorySync.DoesNotExist,))
def sync_inventory(sync_id: int) -> None:
    """Push stock levels to the warehouse, whose API fails the first ``FLAKY_ATTEMPTS`` calls.

    The attempt is counted with an UPDATE that commits before the failure, so the count
    survives the exception and is shared by whichever work process runs the next attempt.
    """
    InventorySync.objects.filter(pk=sync_id).update(attempts=F("attempts") + 1)
    sync = InventorySync.objects.get(pk=sync_id)
    if sync.attempts <= FLAKY_ATTEMPTS:
        raise ConnectionError(f"Warehouse API unreachable (attempt {sync.attempts}).")
    sync.synced_at = timezone.now()
    sync.save(update_fields=["synced_at"])
    logger.info("Inventory sync #%s done after %s attempt(s).", sync.pk, sync.attempts)


def _charge(order: Order, idempotency_key: str) -> None:
    """A stand-in for a payment provider. A real one takes ``idempotency_key`` too, because the
    database cannot roll back a charge that the provider already made."""
    if order.total > CARD_LIMIT:
        raise CardDeclined(f"Card declined for order #{order.pk}: {order.total} is over the card's limit.")


@job(name="shop.charge_card", timeout=30, permanent=(CardDeclined, Order.DoesNotExist))
def charge_card(order_id: int) -> None:
    """Charge the order's card once. A decline is permanent: it goes straight to the dead
    letters, where an operator can requeue it (after the customer raised the limit) or discard it."""
    key = f"charge_card:{order_id}"
    with idempotent(key) as first:
        if not first:
            return
        order = Order.objects.get(pk=order_id)
        _charge(order, key)
        order.status = Order.Status.PAID
        order.save(update_fields=["status"])


@job(name="shop.notify_partner", timeout=10, concurrency=2, rate="5/s", permanent=(Order.DoesNotExist,))
def notify_partner(order_id: int) -> None:
    """Tell the fulfilment partner about an order. Their API allows 2 calls at once and 5 a second;
    the limits hold across every worker, and a job over them waits without using an attempt."""
    order = Order.objects.get(pk=order_id)
    logger.info("Partner notified of order #%s (%s).", order.pk, order.total)


@job(name="shop.nightly_report", timeout=300, cron="0 2 * * *", cron_catch_up="once")
def nightly_report() -> None:
    """Fires once per night (02:00 in TIME_ZONE); if no worker ran then, once when one starts."""
    since = timezone.now() - datetime.timedelta(days=1)
    recent = Order.objects.filter(created_at__gte=since)
    logger.info("Nightly report: %s order(s) in the last day.", recent.count())


@chain(name="shop.export_orders", timeout=60)
def export_orders(cursor: int | None, *, page_size: int) -> Page:
    """Export every order to the warehouse, one page of ``page_size`` per job. A crash redoes at
    most one page; the checkpoint commits with the page's work."""
    orders = list(Order.objects.filter(pk__gt=cursor or 0).order_by("pk")[:page_size])
    for order in orders:
        logger.info("Exported order #%s.", order.pk)
    last = orders[-1].pk if len(orders) == page_size else None
    return Page(next_cursor=last, items=len(orders))
