"""The job store in Redis: key names (:mod:`.keys`), the job record (:mod:`.record`), and the
state machine of Lua-scripted transitions (:mod:`.machine`, its parts beside it, scripts in ``lua/``
declared in :mod:`.scripts`)."""

from __future__ import annotations

from django_jobs.store.keys import (
    DYING,
    JOB_PREFIX,
    LEASES,
    LOST,
    QUEUES_SET,
    VANISHED,
    job_key,
    queue_key,
    scheduled_key,
    wake_key,
    wip_key,
)
from django_jobs.store.machine import Store
from django_jobs.store.model import (
    Beat,
    CancelResult,
    Claim,
    Claimed,
    Finished,
    Pause,
    Pushable,
    Scope,
    Settled,
    VanishedId,
)
from django_jobs.store.record import (
    JOB_ID,
    JobRecord,
    Status,
    int_field,
    new_job_id,
    parse_rq_timestamp,
    rq_timestamp,
    split_token,
    surrogate_id,
    text,
    to_bytes,
    to_text,
    valid_job_id,
)
from django_jobs.store.scripts import load

__all__ = [
    "DYING",
    "JOB_ID",
    "JOB_PREFIX",
    "LEASES",
    "LOST",
    "QUEUES_SET",
    "VANISHED",
    "Beat",
    "CancelResult",
    "Claim",
    "Claimed",
    "Finished",
    "JobRecord",
    "Pause",
    "Pushable",
    "Scope",
    "Settled",
    "Status",
    "Store",
    "VanishedId",
    "int_field",
    "job_key",
    "load",
    "new_job_id",
    "parse_rq_timestamp",
    "queue_key",
    "rq_timestamp",
    "scheduled_key",
    "split_token",
    "surrogate_id",
    "text",
    "to_bytes",
    "to_text",
    "valid_job_id",
    "wake_key",
    "wip_key",
]
