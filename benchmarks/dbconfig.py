"""The benchmark's database, from the environment: shared by the benchmark project's settings and the
peers' (``benchmarks/peerside/settings.py``), so that django-tasks-db runs on the same database.

* ``BENCH_DB``          ``sqlite`` (default) or ``postgres``;
* ``BENCH_SQLITE_PATH`` the SQLite file, in the harness's temporary directory;
* ``BENCH_PG_NAME``     the PostgreSQL database (default ``django_jobs_bench``).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any


def database() -> dict[str, Any]:
    if os.environ.get("BENCH_DB", "sqlite") == "postgres":
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("BENCH_PG_NAME", "django_jobs_bench"),
            "USER": os.environ.get("PGUSER", "postgres"),
            "HOST": os.environ.get("PGHOST", "127.0.0.1"),
            "PORT": os.environ.get("PGPORT", "5432"),
        }
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("BENCH_SQLITE_PATH", os.path.join(tempfile.gettempdir(), "bench.sqlite3")),
        # Several work processes write: take the write lock at BEGIN and wait for it.
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 30},
    }
