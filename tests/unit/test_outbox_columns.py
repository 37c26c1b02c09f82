"""A plain job's outbox row is inserted with the common columns only; the database fills in the rest.
That holds only while every other column has a database default that reads as "not set"."""

from __future__ import annotations

from django.db.models import NOT_PROVIDED

from django_jobs.client import outbox
from django_jobs.models import OutboxEntry, PlainOutboxEntry


def _columns(model: type) -> set[str]:
    return {field.column for field in model._meta.concrete_fields}


def test_the_plain_row_leaves_out_exactly_the_extra_columns_and_each_has_an_empty_database_default():
    assert _columns(PlainOutboxEntry) < _columns(OutboxEntry)
    assert _columns(OutboxEntry) - _columns(PlainOutboxEntry) == {*outbox.EXTRA, *outbox.RELAYED}
    for name in (*outbox.EXTRA, *outbox.RELAYED):
        field = OutboxEntry._meta.get_field(name)
        assert field.db_default is not NOT_PROVIDED, name
        assert not field.db_default and field.db_default == field.default, name
    assert PlainOutboxEntry._meta.db_table == OutboxEntry._meta.db_table
    assert not PlainOutboxEntry._meta.managed
