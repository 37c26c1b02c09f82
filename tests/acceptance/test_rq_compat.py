"""RQ's own tools read django_jobs' state: RQ's API, the ``rq info`` command and django-rq's views."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.urls import reverse
from rq import Queue, Worker
from rq.serializers import JSONSerializer

from django_jobs.models import DeadLetter
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_rq_and_django_rq_read_a_running_runjobs(runjobs, redis_db, client):
    runjobs("default")
    slow = jobs.slow.enqueue("slow", 3)
    wait_for(lambda: SideEffect.objects.filter(key="attempt:slow").exists())
    waiting = jobs.record.options(delay=60).enqueue("later")  # scheduled
    # RQ's Python API
    busy = wait_for(lambda: [w for w in Worker.all(connection=redis_db) if w.get_current_job_id() == slow.id])
    assert busy[0].get_state() == "busy"
    assert busy[0].queue_names() == ["default"]
    rq_queue = Queue("default", connection=redis_db, serializer=JSONSerializer)
    assert slow.id in rq_queue.started_job_registry.get_job_ids(cleanup=False)
    assert waiting.id in rq_queue.scheduled_job_registry.get_job_ids()
    # rq's command line
    info = subprocess.run([sys.executable, "-m", "rq.cli", "info", "--url", settings.REDIS_URL],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "default" in info and "busy" in info
    # django-rq's dashboard, whose pages run RQ's registry cleanup on every view
    client.force_login(User.objects.create_superuser("ops", password="pw"))
    index = list(settings.RQ_QUEUES).index("default")
    for name, args in [
        ("home", []),
        ("jobs", [index]),
        ("started_jobs", [index]),
        ("scheduled_jobs", [index]),
        ("workers", [index]),
        ("job_detail", [index, slow.id]),
    ]:
        response = client.get(reverse(f"django_rq:{name}", args=args))
        assert response.status_code == 200, name
    assert "tests.slow" in client.get(reverse("django_rq:job_detail", args=[index, slow.id])).content.decode()
    # ... and that cleanup did not fail our running job behind the retry policy's back
    wait_for(lambda: SideEffect.objects.filter(key="slow").exists())
    assert redis_db.zcard("rq:failed:default") == 0
    assert not DeadLetter.objects.exists()
    wait_for(lambda: redis_db.hget(f"rq:job:{slow.id}", "status") == b"finished")
