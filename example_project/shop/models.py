"""The shop's data. Jobs receive primary keys, never model instances, and read fresh rows when they run."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    """A customer's order; its invoice and its card charge happen in background jobs."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        PAID = "paid", "paid"

    customer_email = models.EmailField()
    total = models.DecimalField(max_digits=10, decimal_places=2)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    invoice_sent = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.customer_email}, {self.total})"


class InventorySync(models.Model):
    """One run of the inventory sync. Attempts are counted here, not in memory, because each
    attempt of a job may run in a different work process (or on a different machine)."""

    attempts = models.PositiveIntegerField(default=0)
    synced_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "inventory sync"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        state = "synced" if self.synced_at else "pending"
        return f"Inventory sync #{self.pk} ({state} after {self.attempts} attempt(s))"
