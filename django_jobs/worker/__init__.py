"""``runjobs``'s engine: a supervisor over long-lived work processes, plus shared maintenance."""

from __future__ import annotations

from collections.abc import Sequence

from django_jobs.conf import MAX_ASYNC_JOBS, jobs_settings
from django_jobs.core.connections import by_server, get_connection, queue_configs
from django_jobs.exceptions import ConfigurationError
from django_jobs.worker.process import BURST_WAIT
from django_jobs.worker.servers import PROBE_TIMEOUT, Server
from django_jobs.worker.supervisor import Supervisor

#: The worker's Redis socket timeout: above the 1 s idle BLPOP, low enough to notice a frozen Redis.
WORKER_SOCKET_TIMEOUT = 10.0
#: With queues on several Redis servers: a frozen one holds up a claim or a maintenance pass at most
#: this long, once, before it is set aside and only probed (the idle waits do not use it).
SHARDED_SOCKET_TIMEOUT = 2.0


def build_supervisor(
    queues: Sequence[str],
    *,
    concurrency: int = 1,
    burst: bool = False,
    max_jobs: int = 0,
    burst_wait: float = BURST_WAIT,
    async_jobs: int | None = None,
) -> Supervisor:
    """Check the queues, then build the supervisor that serves them (listed queues come first), one
    set of duties per Redis server they live on."""
    names = list(queues) or sorted(queue_configs())
    if not names:
        raise ConfigurationError("No queues to serve: settings.RQ_QUEUES is empty.")
    groups = by_server(names)  # also raises for an unknown queue
    if not 0 <= burst_wait < float("inf"):  # NaN fails both comparisons
        raise ConfigurationError(f"--burst-wait must be a finite number at least 0, got {burst_wait:g}.")
    if concurrency < 1:
        raise ConfigurationError(f"--concurrency must be at least 1, got {concurrency}.")
    try:
        lanes = jobs_settings.ASYNC_JOBS if async_jobs is None else async_jobs
    except (TypeError, ValueError) as exc:  # what manage.py check reports as E036
        raise ConfigurationError(f"JOBS['ASYNC_JOBS'] cannot be read: {exc}") from None
    if not 1 <= lanes <= MAX_ASYNC_JOBS:
        given = "JOBS['ASYNC_JOBS']" if async_jobs is None else "--async-jobs"
        raise ConfigurationError(f"{given} must be from 1 to {MAX_ASYNC_JOBS}, got {lanes}.")
    timeout = WORKER_SOCKET_TIMEOUT if len(groups) == 1 else SHARDED_SOCKET_TIMEOUT
    servers = [
        Server(
            tuple(group),
            get_connection(group[0], socket_timeout=timeout),
            get_connection(group[0], socket_timeout=PROBE_TIMEOUT),
        )
        for group in groups
    ]
    return Supervisor(
        servers,
        concurrency=concurrency,
        burst=burst,
        max_jobs=max_jobs,
        burst_wait=burst_wait,
        async_jobs=lanes,
    )
