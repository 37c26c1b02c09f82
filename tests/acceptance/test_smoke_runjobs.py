import pytest

from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect


@pytest.mark.django_db(transaction=True)
def test_runjobs_runs(runjobs):
    worker = runjobs("--concurrency", "2")
    for i in range(20):
        jobs.record.enqueue(f"k{i}")
    wait_for(lambda: SideEffect.objects.count() == 20)
    assert worker.terminate() == 0, worker.output()
