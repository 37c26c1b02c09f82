"""``runjobs --metrics-port``: one HTTP endpoint for the supervisor and all its work processes."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import start_http_server
from prometheus_client.metrics_core import Metric
from redis.exceptions import RedisError

from django_jobs.core import registry
from django_jobs.core.connections import store_of
from django_jobs.core.outcomes import Outcome
from django_jobs.telemetry import metrics

logger = logging.getLogger("django_jobs.worker")


class PauseGauges:
    """The pause gauges of the queues this runjobs serves, read from Redis at scrape time (one HGETALL,
    on a client with the web side's short timeout), as the web side reads its own: a work process
    busy with a long job would report a stale value."""

    def __init__(self, queues: Sequence[str]) -> None:
        self.store, self.queues = store_of(queues[0]), list(queues)

    def collect(self) -> Iterable[Metric]:
        try:
            return metrics.pause_families(self.queues, self.store.pauses(), time.time())
        except RedisError as exc:
            logger.warning("Pause gauges left out of this scrape: Redis did not answer (%s)", exc)
            return metrics.pause_families([], [], 0.0)


@contextlib.contextmanager
def serving(addr: str, port: int, queues: Sequence[str], servers: Sequence[str] = ()) -> Iterator[int]:
    """Serve ``/metrics`` on ``addr:port`` (0 picks a free port) and yield the port. ``servers``: the
    names of the Redis servers runjobs serves (``django_jobs_worker_redis_up``).

    Call it before the supervisor forks: the work processes inherit the switch to multi-process
    values. The files live in a private directory, removed on exit, so a restart starts from zero
    as a scraper expects of a new process, and nothing else shares it.
    """
    directory = tempfile.mkdtemp(prefix="django-jobs-metrics-")
    try:
        metrics.use_multiprocess(directory)
        metrics.initialise(
            queues,
            [(job.name, job.queue) for job in registry.all_jobs()],
            [o.value for o in Outcome],
            servers,
        )
        served = metrics.registry(PauseGauges(queues))
        server, thread = start_http_server(port, addr, registry=served)
        # A forked work process must not hold the listening socket open (a restarted runjobs
        # could not bind it while an orphan lives).
        os.register_at_fork(after_in_child=server.socket.close)
        logger.info("Worker metrics on http://%s:%d/metrics", addr, server.server_port)
        try:
            yield server.server_port
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
