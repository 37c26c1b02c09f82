"""A poison job's secrets stay hidden end to end: a real RQ job, dead-lettered by the worker, then
shown in the admin and by ``manage.py deadletters``."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from rq import Queue
from rq.serializers import JSONSerializer

from django_jobs.models import DeadLetter
from django_jobs.testing import run_jobs
from tests.integration.dashboard_support import ALL_PERMISSIONS, operator

pytestmark = pytest.mark.django_db(transaction=True)

SECRETS = ("hunter2", "sk_live_1")


def shown_everywhere(client, entry: DeadLetter) -> str:
    operator(client, *ALL_PERMISSIONS)
    pages = [
        client.get(reverse("admin:django_jobs_deadletter_change", args=[entry.pk])),
        client.get(reverse("admin:django_jobs_deadletter_changelist")),
        client.get(reverse("admin:django_jobs_deadletter_groups")),
    ]
    assert all(page.status_code == 200 for page in pages)
    out = io.StringIO()
    for args in (["show", str(entry.pk)], ["list"], ["list", "--json"], ["list", "--by-group", "--json"]):
        call_command("deadletters", *args, stdout=out)
    return "".join(page.content.decode() for page in pages) + out.getvalue()


@pytest.mark.parametrize("serializer", [JSONSerializer, None], ids=["json", "pickle"])
def test_an_unregistered_jobs_secrets_are_not_shown(redis_db, client, serializer):
    queue = Queue("default", connection=redis_db, serializer=serializer)
    rq_job = queue.enqueue("shop.charge", 42, password="hunter2", auth={"api_key": "sk_live_1"})
    run_jobs()
    entry = DeadLetter.objects.get(job_id=rq_job.id)
    assert entry.raw  # the snapshot is kept (and stored unredacted, for the record)
    shown = shown_everywhere(client, entry)
    assert "shop.charge" in shown
    assert not [secret for secret in SECRETS if secret in shown]


def test_the_redacted_hash_is_still_json_an_operator_can_read(redis_db):
    rq_job = Queue("default", connection=redis_db, serializer=JSONSerializer).enqueue(
        "shop.charge", 42, password="hunter2"
    )
    run_jobs()
    out = io.StringIO()
    call_command("deadletters", "show", str(DeadLetter.objects.get(job_id=rq_job.id).pk), stdout=out)
    hash_text = out.getvalue().split("Redis hash (redacted):\n")[1].split("\nattempts:")[0]
    assert json.loads(hash_text)["status"]
