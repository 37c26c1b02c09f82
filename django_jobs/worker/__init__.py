"""``runjobs``'s engine: a supervisor over long-lived work processes, plus shared maintenance."""

from __future__ import annotations

from collections.abc import Sequence

from ..connections import connection_identity, get_connection, queue_configs
from ..exceptions import ConfigurationError
from .process import BURST_WAIT
from .supervisor import Supervisor

#: The worker's Redis socket timeout: above the 1 s idle BLPOP, low enough to notice a frozen Redis.
WORKER_SOCKET_TIMEOUT = 10.0


def build_supervisor(
    queues: Sequence[str],
    *,
    concurrency: int = 1,
    burst: bool = False,
    max_jobs: int = 0,
    burst_wait: float = BURST_WAIT,
) -> Supervisor:
    """Check the queues, then build the supervisor that serves them (listed queues come first)."""
    names = list(queues) or sorted(queue_configs())
    if not names:
        raise ConfigurationError("No queues to serve: settings.RQ_QUEUES is empty.")
    identities = {connection_identity(name) for name in names}  # also raises for an unknown queue
    if len(identities) > 1:
        raise ConfigurationError(
            f"Queues {', '.join(names)} live on different Redis servers; run one runjobs per server."
        )
    if not 0 <= burst_wait < float("inf"):  # NaN fails both comparisons
        raise ConfigurationError(f"--burst-wait must be a finite number at least 0, got {burst_wait:g}.")
    if concurrency < 1:
        raise ConfigurationError(f"--concurrency must be at least 1, got {concurrency}.")
    connection = get_connection(names[0], socket_timeout=WORKER_SOCKET_TIMEOUT)
    return Supervisor(
        connection, names, concurrency=concurrency, burst=burst, max_jobs=max_jobs, burst_wait=burst_wait
    )
