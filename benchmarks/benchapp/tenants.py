"""The jobs of the fairness benchmark (``benchmarks/fairness.py``): one tenant's backlog ahead of nine
others'. A module of their own, imported by ``runjobs`` only for that benchmark (``JOBS["IMPORT_MODULES"]``),
so the other benchmarks' workers carry no limits they do not use (the claim reads every limit)."""

from __future__ import annotations

import os
import time

from django_jobs import job


def _tenant_work(tenant: str, n: int, ms: float, path: str) -> None:
    """A tenant's job: ``ms`` milliseconds of waiting on something else (an API, a database). Appends
    ``<tenant> <n> <start> <end>`` to ``path`` (one O_APPEND write), so the benchmark sees when it ran."""
    started = time.time()
    if ms:
        time.sleep(ms / 1000)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{tenant} {n} {started:.6f} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


#: No limit: the queue's plain FIFO order.
tenant_plain = job(name="bench.tenant_plain", timeout=30)(_tenant_work)
#: At most one job at a time per tenant (limit_key): a tenant at its limit is parked.
tenant_keyed = job(name="bench.tenant_keyed", timeout=30, concurrency=1, limit_key=lambda tenant, *_: tenant)(
    _tenant_work
)
#: The same limit without limit_key: one job type per tenant, each with concurrency=1, so a job over
#: its limit is deferred to the scheduled set and comes back to the queue 0.5 s later.
tenant_types = [job(name=f"bench.tenant_{n}", timeout=30, concurrency=1)(_tenant_work) for n in range(10)]
