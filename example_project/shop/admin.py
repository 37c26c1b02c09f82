"""Admin pages for the shop's rows, next to django_jobs' dead-letter admin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin

from .models import InventorySync, Order

if TYPE_CHECKING:
    _OrderBase = admin.ModelAdmin[Order]
    _SyncBase = admin.ModelAdmin[InventorySync]
else:
    _OrderBase = _SyncBase = admin.ModelAdmin


@admin.register(Order)
class OrderAdmin(_OrderBase):
    list_display = ("id", "customer_email", "total", "status", "invoice_sent", "created_at")
    list_filter = ("status", "invoice_sent")
    search_fields = ("customer_email",)


@admin.register(InventorySync)
class InventorySyncAdmin(_SyncBase):
    list_display = ("id", "attempts", "synced_at", "created_at")
    readonly_fields = ("attempts", "synced_at", "created_at")
