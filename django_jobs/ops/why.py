"""Why a job is where it is: one plain sentence naming what holds it and what lifts it.

It reads the job's state from the read model (:mod:`django_jobs.store.read`) and adds what the
state alone cannot say: who paused what and why, its key's limit, its retry policy, whether any
``runjobs`` serves its queue, its dead letter or its outbox row. The job page, ``get_job(id).why``
and ``manage.py jobs why`` all print this sentence, so an operator reads the same answer everywhere.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass

from redis import Redis
from redis.exceptions import RedisError

from django_jobs.conf import LEDGER, jobs_settings
from django_jobs.core import connections, registry
from django_jobs.core.results import JobState
from django_jobs.exceptions import JobDoesNotExist, JobNotFound
from django_jobs.models import DeadLetter, JobHistory, OutboxEntry, outbox_aliases
from django_jobs.store import read, valid_job_id
from django_jobs.store.lifecycle import F, State
from django_jobs.store.model import Pause


@dataclass(frozen=True)
class Seen:
    """What a sentence may look at besides the job: how many live work processes serve a queue
    (asked only of a job ready to run), and whether its key's value (read from its arguments, so
    payload) may be named."""

    serving: Callable[[str], int]
    show_key: bool = True


def _key(job: JobState, seen: Seen) -> str:
    return f"key `{job.limit_key}`" if seen.show_key else "its key"


def explain(job: JobState) -> str:
    """The sentence for a job whose record Redis holds (``JobState.why``, connected by the app)."""
    if job.where is None:
        return "read from its record alone: get_job(id) says what holds it"
    return sentence(job, job.where, Seen(lambda queue: read.serving(connections.home(queue), queue)))


def sentence(job: JobState, where: read.Where, seen: Seen) -> str:
    """:func:`explain` given the read model's ``where``."""
    state = where.state
    if state is None:
        status = job.status.value if job.status else "nothing readable"
        return (
            f"its record says {status}, but no queue, schedule or lease holds it: nothing will run it "
            "(`manage.py jobs_health --audit` lists such jobs)"
        )
    return _SENTENCES[state](job, where, seen)


def _ready(job: JobState, where: read.Where, seen: Seen) -> str:
    queue = job.queue
    place = f"ready on queue `{queue}`, {_ahead(where.ahead)}"
    if where.priority:
        place += f" (priority {where.priority})"
    if where.state is State.TURN:
        place = f"{_key(job, seen)} has a free slot: {place}"
    if not seen.serving(queue):
        waited = f"; it has waited {_span(_now() - job.enqueued_at.timestamp())}" if job.enqueued_at else ""
        return f"{place}, but no runjobs serves queue `{queue}`{waited}: start `manage.py runjobs {queue}`"
    return f"{place}: a runjobs serving `{queue}` takes it in turn"


def _ahead(ahead: int | None) -> str:
    if ahead is None:
        return f"more than {read.LIST_LOOK:,} jobs ahead of it"
    return "next in line" if ahead == 0 else f"{_count(ahead, 'job')} ahead of it"


def _paused(pause: Pause | None) -> str:
    if pause is None:
        return "a pause"
    what = f"{'queue' if pause.kind == 'queue' else 'job type'} `{pause.name}`"
    by = f" by {pause.by}" if pause.by else ""
    since = f" since {_time(pause.at)}" if pause.at is not None else ""
    reason = f' (reason: "{pause.reason}")' if pause.reason else ""
    return f"{what} is paused{by}{since}{reason}: resume it"


def _held(job: JobState, where: read.Where, seen: Seen) -> str:
    return f"{_paused(where.pause)}; it then runs from queue `{job.queue}`, {_ahead(where.ahead)}"


def _in_line(job: JobState, where: read.Where, seen: Seen) -> str:
    scope = registry.limit_scope(where.record)
    limit = []
    if scope is not None and scope.concurrency:
        limit.append(f"{scope.concurrency} at a time")
    if scope is not None and scope.rate:
        limit.append(f"{scope.rate} starts per {_span(scope.period)}")
    of = f"'s limit of {' and '.join(limit)}" if limit else "'s limit"
    sentence = f"parked behind {_key(job, seen)}{of} (job type `{job.name}`), {_ahead(where.ahead)}"
    if where.pause is not None:
        return f"{sentence}; and {_paused(where.pause)}"
    return f"{sentence}: it runs when a slot of its key frees"


def _scheduled(job: JobState, where: read.Where, seen: Seen) -> str:
    due = f"due at {_time(where.due)}" if where.due is not None else "due"
    if where.state is State.RETRYING:
        last = job.errors[-1] if job.errors else None
        failed = f", after {last.exception.rpartition('.')[2]}: {_short(last.message)}" if last else ""
        return f"attempt {job.attempts + 1} of {_max_attempts(job.name)} {due}{failed}"
    if where.state is State.SNOOZED:
        return f"snoozed ({_count(job.snoozes, 'time')}): {due}"
    return f"scheduled: {due}, delayed at enqueue, debounced, or deferred over its type's limit"


def _running(job: JobState, where: read.Where, seen: Seen) -> str:
    started = job.last_attempted_at
    since = f" since {_time(started.timestamp())}" if started else ""
    on = f" on `{where.worker}`" if where.worker else ""
    sentence = f"running{on}{since} (attempt {job.attempts} of {_max_attempts(job.name)})"
    if job.cancel_requested_at is not None:
        sentence += f"; asked to stop at {_time(job.cancel_requested_at.timestamp())}"
    if where.lease_expires is not None:
        sentence += f"; its lease runs to {_time(where.lease_expires)}, renewed while its runjobs lives"
    return sentence


Sentence = Callable[[JobState, read.Where, "Seen"], str]


#: What an ended state means for the job, after "<state> at <when>".
_HOW = {
    State.FINISHED: "it ran to success",
    State.CANCELLED: "it will not run again",
    State.EXPIRED: "it had not started by its expiry, so it was dropped unrun",
}


def _ended(job: JobState, where: read.Where, seen: Seen) -> str:
    """An ended state's sentence: the state's name, when, and what it means."""
    state = where.state or State.FINISHED
    at = f" at {_time(job.finished_at.timestamp())}" if job.finished_at else ""
    return f"{state.value}{at}: {_HOW[state]}"


def _past(row: JobHistory) -> str:
    """The sentence of a job Redis let go, from its history row."""
    state = State.__members__.get(row.state.upper(), State.FINISHED)
    how = _HOW.get(state, _requeue)
    return (
        f"{state.value} at {_time(row.ended_at.timestamp())} after {_count(row.attempts, 'attempt')}: {how}"
    )


def _dead(job: JobState, where: read.Where, seen: Seen) -> str:
    letter = _dead_letter(job.id)
    ended = letter.created_at if letter is not None else job.finished_at
    at = f" at {_time(ended.timestamp())}" if ended else ""
    reason = f" ({letter.reason})" if letter is not None else ""
    return f"dead-lettered{at}{reason} after {_count(job.attempts, 'attempt')}: {_requeue}"


def _replaced(job: JobState, where: read.Where, seen: Seen) -> str:
    newer = where.record.text(F.REPLACED_BY)
    by = f" (job {newer})" if newer else ""
    return f"replaced by a newer enqueue of the same debounced job{by}: it never runs"


_requeue = "requeue it from its dead letter"
_SENTENCES: dict[State, Sentence] = {
    State.WAITING: _ready,
    State.WAITING_PRIORITY: _ready,
    State.TURN: _ready,
    State.HELD: _held,
    State.PARKED: _held,
    State.IN_LINE: _in_line,
    State.SCHEDULED: _scheduled,
    State.RETRYING: _scheduled,
    State.SNOOZED: _scheduled,
    State.RUNNING: _running,
    State.LOST: lambda job, where, seen: (
        f"its worker `{where.worker}` stopped renewing its lease: a runjobs supervisor retries it or "
        "dead-letters it within seconds"
    ),
    State.DYING: lambda job, where, seen: "it failed for good: its dead letter is being written",
    State.VANISHED: lambda job, where, seen: (
        "its record was lost from Redis (evicted or flushed): its dead letter is being written"
    ),
    State.FINISHED: _ended,
    State.DEAD: _dead,
    State.CANCELLED: _ended,
    State.EXPIRED: _ended,
    State.REPLACED: _replaced,
    State.FOREIGN: lambda job, where, seen: (
        f"a foreign worker ({where.record.worker or 'an rqworker'}, not runjobs) took it from queue "
        f"`{job.queue}` and failed it unrun: runjobs moves it to the dead letters within seconds; stop that "
        "worker (manage.py jobs_health names it), then requeue it"
    ),
}


def why(job_id: str, *, queue: str | None = None, show_key: bool = True) -> str:
    """The sentence for any job id: one Redis holds (``get_job(id).why``), one whose record Redis lost
    (vanished), one still in the outbox, one whose record expired but whose dead letter is kept, one
    on a Redis server that does not answer. ``queue`` saves looking on every server; ``show_key``
    False leaves out the value of its ``limit_key`` (for a reader without the payload permission).

    Raises :class:`JobDoesNotExist` for an id nothing knows, ``ValueError`` for one that cannot be
    a job id."""
    if not isinstance(job_id, str) or not valid_job_id(job_id):
        raise ValueError(f"{job_id!r} is not a job id: letters, digits, _ and -, 1 to 64 of them.")
    down: dict[str, str] = {}  # queue -> the address of its server, which did not answer
    for names, store in connections.server_stores([queue] if queue else list(connections.queue_configs())):
        try:
            where = read.where(store, job_id, names)
        except RedisError:
            down.update(dict.fromkeys(names, _url(store.connection)))
            continue
        if where.record.exists:
            seen = Seen(functools.partial(read.serving, store.connection), show_key)
            return sentence(JobState.from_record(where.record, where), where, seen)
        if where.state is State.VANISHED:
            return _SENTENCES[State.VANISHED](JobState.from_record(where.record, where), where, Seen(_nobody))
    past = JobHistory.objects.filter(job_id=job_id).first()
    if past is not None and past.state != State.DEAD.name.lower():  # a dead letter says more
        return _past(past)
    letter = _dead_letter(job_id)
    if letter is not None:
        return f"dead-lettered at {_time(letter.created_at.timestamp())} ({letter.reason}): {_requeue}"
    for alias in outbox_aliases():
        row = OutboxEntry.objects.using(alias).filter(pk=job_id).only("queue").first()
        if row is not None and row.queue in down:
            return (
                f"its Redis server {down[row.queue]} (queue `{row.queue}`) is unreachable: its outbox row "
                "keeps it, and runjobs pushes it once the server answers"
            )
        if row is not None:
            return _outbox(row.queue)
    if down:
        servers = sorted(
            {f"{url} (queues {', '.join(q for q in down if down[q] == url)})" for url in down.values()}
        )
        return f"not found on the Redis servers that answer; unreachable: {'; '.join(servers)}"
    raise JobDoesNotExist(f"No job {job_id} is known: never enqueued, or its record expired.")


def _outbox(queue: str) -> str:
    """A job whose outbox row exists but that Redis does not hold."""
    relay = "runjobs relays it as soon as Redis answers"
    if jobs_settings.durability(queue) == LEDGER:
        every = jobs_settings.LEDGER_SWEEP_INTERVAL
        relay = f"Redis may have lost it too: runjobs pushes it (again) within {every:g} s of Redis answering"
    return (
        f"in the outbox for queue `{queue}`, not in Redis: the transaction that enqueued it has not "
        f"committed, or Redis was down; {relay}"
    )


def _dead_letter(job_id: str) -> DeadLetter | None:
    return DeadLetter.objects.filter(job_id=job_id).only("pk", "created_at", "reason").first()


def _nobody(queue: str) -> int:
    return 0


def _url(connection: Redis) -> str:
    """The server's address as an operator would type it, without its password."""
    kwargs = connection.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def _max_attempts(name: str) -> str:
    try:
        return str(registry.get(name).policy.max_attempts)
    except JobNotFound:
        return "?"


def _now() -> float:
    return dt.datetime.now(dt.UTC).timestamp()


def _time(at: float) -> str:
    """A moment as the admin shows it, in UTC, with how far it is from now."""
    when = dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    delta = at - _now()
    if abs(delta) < 1:
        return f"{when} (now)"
    return f"{when} ({'in ' + _span(delta) if delta > 0 else _span(-delta) + ' ago'})"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


def _short(message: str, limit: int = 120) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
