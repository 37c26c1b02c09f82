"""The shop's background jobs, one per behaviour django_jobs is built for.

* ``shop.send_invoice``: a side effect that must happen once, however often the job is delivered.
* ``shop.sync_inventory``: a flaky upstream; the job fails twice, is retried with backoff, then succeeds.
* ``shop.charge_card``: an error that retrying cannot fix; the job is dead-lettered on its first attempt.

Each job takes primary keys (plain JSON values) and reads the rows itself, so it always sees
committed data as it is when the job runs, not as it was at enqueue.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from django.core.mail import send_mail
from django.db.models import F
from django.utils import timezone

from django_jobs import RetryPolicy, idempotent, job

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


@job(name="shop.send_invoice", queue="emails", timeout=30, permanent=(Order.DoesNotExist,))
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
