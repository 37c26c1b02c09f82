import pytest
from django.db import transaction

from django_jobs.testing import run_jobs
from tests.testapp import jobs
from tests.testapp.models import SideEffect


@pytest.mark.django_db(transaction=True)
def test_enqueue_and_run():
    jobs.record.enqueue("a")
    with transaction.atomic():
        jobs.record.enqueue("b")
    assert run_jobs() == 2
    assert sorted(SideEffect.objects.values_list("key", flat=True)) == ["a", "b"]
