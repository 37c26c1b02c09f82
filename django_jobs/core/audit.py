"""The admin log (*Recent actions*) as the one audit trail of what operators did, from the admin or
a command: who, on what, what, when. Jobs, pauses and dead letters all write it through here."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


class Entry(NamedTuple):
    """One action on one thing: its id, how it reads ("Job 7f3…"), and what was done."""

    object_id: str
    object_repr: str
    message: str


def record(actor: Any, entries: Iterable[Entry], *, model: Any = None, using: str = "default") -> None:
    """Write one admin log entry per action, in one INSERT, under ``actor``; nothing for no actor (a
    worker acts for nobody). ``model``: the model the ids are of, if they are rows (a dead letter)."""
    if actor is None or not actor.is_authenticated:
        return
    # Imported here: workers record dead letters without django.contrib.admin installed.
    from django.contrib.admin.models import CHANGE, LogEntry
    from django.contrib.contenttypes.models import ContentType

    kind = ContentType.objects.db_manager(using).get_for_model(model) if model is not None else None
    LogEntry.objects.using(using).bulk_create(
        LogEntry(
            user_id=actor.pk,
            content_type=kind,
            object_id=entry.object_id[:200],
            object_repr=entry.object_repr[:200],
            action_flag=CHANGE,
            change_message=entry.message,
        )
        for entry in entries
    )
