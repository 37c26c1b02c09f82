"""``manage.py shop_demo_enqueue``: create a few orders and enqueue one of each shop job."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from example_project.shop import jobs
from example_project.shop.models import InventorySync, Order


class Command(BaseCommand):
    help = "Create a few orders, enqueue one of each shop job and start the order export chain."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--manifest",
            type=Path,
            help="Also write the ids of the rows and jobs to this JSON file (shop_demo_check reads it).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # One transaction, as a view would do it: the jobs reach Redis only when it commits, so a
        # worker can never pick up an order id whose row is not visible yet.
        with transaction.atomic():
            invoiced = Order.objects.create(customer_email="alice@example.com", total=Decimal("42.00"))
            over_limit = Order.objects.create(customer_email="bob@example.com", total=Decimal("999.00"))
            Order.objects.create(customer_email="carol@example.com", total=Decimal("17.50"))
            sync = InventorySync.objects.create()
            handles = {
                "send_invoice": jobs.send_invoice.enqueue(invoiced.pk),
                "sync_inventory": jobs.sync_inventory.enqueue(sync.pk),
                "charge_card": jobs.charge_card.enqueue(over_limit.pk),
            }
            jobs.notify_partner.enqueue_many([(order.pk,) for order in Order.objects.all()])
            export = jobs.export_orders.start(page_size=2)
        self.stdout.write(f"Started the order export chain {export.pk} (pages of 2 orders)")
        for handle in handles.values():
            self.stdout.write(f"Enqueued {handle.name} on queue {handle.queue!r} (job {handle.id})")
        manifest = options["manifest"]
        if manifest is not None:
            manifest.parent.mkdir(parents=True, exist_ok=True)
            manifest.write_text(
                json.dumps(
                    {
                        "invoice_order": invoiced.pk,
                        "charge_order": over_limit.pk,
                        "inventory_sync": sync.pk,
                        "jobs": {key: handle.id for key, handle in handles.items()},
                    },
                    indent=2,
                )
            )
