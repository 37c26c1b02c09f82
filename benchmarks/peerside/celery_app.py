"""Celery (Redis transport): ``bench.noop`` and ``bench.wait``; no result is kept, like ``runjobs``'."""

from __future__ import annotations

import os

from celery import Celery

from benchmarks import stamp

app = Celery("bench", broker=os.environ["BENCH_PEER_BROKER"])
app.conf.update(task_ignore_result=True, broker_connection_retry_on_startup=True)


@app.task(name="bench.noop")
def noop(n: int, path: str) -> None:
    stamp.noop(n, path)


@app.task(name="bench.wait")
def wait(n: int, path: str) -> None:
    stamp.wait(n, path)  # under -P gevent, time.sleep is gevent's (celery patches before it imports)
