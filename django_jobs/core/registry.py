"""``@job`` and the registry the worker looks jobs up in by their stable name.

The worker never imports a dotted path read from Redis: a job runs only if a
``@job`` registered its name (or one of its ``aliases``) in this process.
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, overload

from asgiref.sync import iscoroutinefunction
from croniter import croniter

from django_jobs.conf import jobs_settings
from django_jobs.core.envelope import Call, Options, check_expires, check_priority, expiry
from django_jobs.core.results import JobHandle
from django_jobs.exceptions import ConfigurationError, JobNotFound, LimitKeyError
from django_jobs.policy import RetryPolicy
from django_jobs.store import JobRecord, Scope
from django_jobs.store.lifecycle import F

P = ParamSpec("P")
R = TypeVar("R")
#: A payload to verify a job with: keyword arguments, positional ones, or a function that makes the
#: rows they name (in the verification's database) and returns either.
Example = dict[str, Any] | list[Any] | tuple[Any, ...] | Callable[[], Any]

_registry: dict[str, Job[Any, Any]] = {}
_lock = threading.Lock()


class Delivery(Protocol):
    """What ``Job.enqueue`` hands its calls to: ``enqueue.enqueue_calls``."""

    def __call__(
        self, definition: Job[Any, Any], calls: Sequence[Call], *, using: str | None, options: Options
    ) -> list[JobHandle]: ...


_delivery: list[Delivery] = []


def deliver_through(delivery: Delivery) -> None:
    """Connect ``Job.enqueue`` to delivery. The app's ``ready()`` does it, so the registry (job
    definitions) stays below the enqueue machinery that imports it, with no import back up."""
    _delivery[:] = [delivery]


#: The options of a plain enqueue, built once.
_PLAIN = Options()


def _deliver(
    definition: Job[Any, Any], calls: Sequence[Call], using: str | None, options: Options
) -> list[JobHandle]:
    if not _delivery:
        raise ConfigurationError(
            f"Job {definition.name!r} cannot be enqueued before Django is set up with "
            "'django_jobs' in INSTALLED_APPS."
        )
    return _delivery[0](definition, calls, using=using, options=options)


@dataclass(frozen=True, eq=False)
class Job(Generic[P, R]):
    """A registered job: the function plus everything the worker needs to run it safely."""

    func: Callable[P, R]
    name: str
    queue: str
    timeout: float
    retry: RetryPolicy | None = None
    permanent: tuple[type[BaseException], ...] = ()
    aliases: tuple[str, ...] = field(default=())
    concurrency: int | None = None
    rate: tuple[int, float] | None = None
    cron: str | None = None
    cron_catch_up: str = "skip"
    store_result: bool = False
    is_async: bool = False
    priority: int = 0
    limit_key: Callable[..., object] | None = None
    expires: float | None = None  # seconds after each enqueue: not started by then, dropped unrun
    max_snoozes: int | None = None  # None: JOBS["MAX_SNOOZES"]
    examples: tuple[Example, ...] = ()  # payloads manage.py jobs_verify proves the job safe with

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """A plain call runs the function inline, as if it were not a job."""
        return self.func(*args, **kwargs)

    @property
    def policy(self) -> RetryPolicy:
        """This job's retry policy, or ``JOBS["DEFAULT_RETRY"]`` read now."""
        return self.retry or jobs_settings.default_retry()

    def limit_value(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """The key this call's limits count under, as text ("" without ``limit_key``): what
        ``limit_key`` returns for the call's arguments. Raises LimitKeyError, naming the job, if it
        raises or returns anything but a short string or an int."""
        if self.limit_key is None:
            return ""
        try:
            value = self.limit_key(*args, **kwargs)
        except Exception as exc:
            raise LimitKeyError(
                f"Job {self.name!r}: its limit_key raised {type(exc).__name__}: {exc}"
            ) from exc
        return _limit_text(self.name, value)

    @property
    def snooze_cap(self) -> int:
        """How often this job may snooze in all, ``max_snoozes`` or ``JOBS["MAX_SNOOZES"]`` read now."""
        return self.max_snoozes or jobs_settings.MAX_SNOOZES

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue one run; inside a transaction it reaches Redis only if the transaction commits."""
        return _deliver(self, [(args, kwargs)], None, _PLAIN)[0]

    def enqueue_in(self, delay: float | dt.timedelta, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue one run to start after ``delay`` (seconds or a timedelta)."""
        seconds = delay.total_seconds() if isinstance(delay, dt.timedelta) else float(delay)
        return self.options(delay=seconds).enqueue(*args, **kwargs)

    def enqueue_at(self, when: dt.datetime, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        """Queue one run to start at ``when``, an aware datetime (RQ would read a naive one as local time)."""
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"enqueue_at() needs an aware datetime, got the naive {when!r}.")
        return self.enqueue_in((when - dt.datetime.now(dt.UTC)).total_seconds(), *args, **kwargs)

    def enqueue_many(
        self, calls: Iterable[Sequence[Any] | Mapping[str, Any]], *, using: str | None = None
    ) -> list[JobHandle]:
        """Queue many runs in one Redis round trip. Each call is a tuple of args or a dict of kwargs."""
        pairs = [((), dict(c)) if isinstance(c, Mapping) else (tuple(c), {}) for c in calls]
        return _deliver(self, pairs, using, _PLAIN)

    def using(self, database: str) -> BoundJob[P, R]:
        """Wait for the commit of ``database`` rather than guessing which transaction matters."""
        return self.options(database=database)

    def options(
        self,
        *,
        database: str | None = None,
        delay: float = 0.0,
        unique_key: str = "",
        debounce: float = 0.0,
        queue: str = "",
        priority: int | None = None,
        expires: float | dt.timedelta | dt.datetime | None = None,
    ) -> BoundJob[P, R]:
        """Enqueue with options: ``job.options(unique_key="sync:42", debounce=5).enqueue(42)``.

        ``unique_key``: at most one queued or running job per key; another enqueue meanwhile is
        dropped. With ``debounce`` (seconds) the job waits that long and a newer enqueue with the
        same key within the window replaces it: the last one wins. ``queue``: another queue than
        the job's own (any ``runjobs`` serving it runs the job: workers look jobs up by name).
        ``priority`` (-100 to 100) replaces the job's own for this enqueue. ``expires`` (seconds or a
        timedelta after the enqueue, or an aware datetime) replaces the job's own expiry: a job that
        has not started by then is dropped unrun (status canceled, outcome ``expired``).
        """
        expires_in, expires_at = expiry(expires) if expires is not None else (0.0, 0.0)
        settings = Options(delay=delay, unique_key=unique_key, debounce=debounce, queue=queue,
                           priority=priority, expires_in=expires_in, expires_at=expires_at)  # fmt: skip
        return BoundJob(self, database, settings)


@dataclass(frozen=True)
class BoundJob(Generic[P, R]):
    """A job with enqueue options fixed: its database alias, delay, unique key, debounce window, priority."""

    job: Job[P, R]
    database: str | None
    settings: Options

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        return _deliver(self.job, [(args, kwargs)], self.database, self.settings)[0]


def _check_timeout(name: str, timeout: object) -> float:
    if timeout is None:
        raise ValueError(
            f"@job {name!r} needs timeout= (seconds): every job must have a finite timeout, "
            "set a little above its p99 run time."
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise ValueError(f"@job {name!r}: timeout must be a finite number of seconds, got {timeout!r}.")
    if timeout <= 0:
        raise ValueError(f"@job {name!r}: timeout must be positive, got {timeout!r}.")
    return float(timeout)


def _check_permanent(name: str, permanent: object) -> tuple[type[BaseException], ...]:
    items = permanent if isinstance(permanent, tuple | list) else (permanent,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ValueError(f"@job {name!r}: permanent= takes exception classes, got {item!r}.")
    return tuple(items)


def _check_names(name: str, queue: str, aliases: Sequence[str], retry: RetryPolicy | None) -> None:
    if not isinstance(queue, str) or not queue:
        raise ValueError(f"@job {name!r}: queue must be a non-empty string, got {queue!r}.")
    if isinstance(aliases, str) or not all(isinstance(a, str) and a for a in aliases):
        raise ValueError(f"@job {name!r}: aliases= takes a list of names, got {aliases!r}.")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ValueError(f"@job {name!r}: retry= takes a RetryPolicy, got {retry!r}.")


_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The longest key value ``limit_key`` may give, in characters.
MAX_LIMIT_KEY = 100


def _limit_text(name: str, value: object) -> str:
    """A key value as the limits count it: a string as it is, an int as its digits (so 7 and "7" are
    one key). Short and printable, since it becomes part of Redis key names."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 256:
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise LimitKeyError(
            f"Job {name!r}: limit_key must return a string or an int, got {type(value).__name__} "
            f"{str(value)[:60]!r}."
        )
    if not text or len(text) > MAX_LIMIT_KEY or not text.isprintable():
        raise LimitKeyError(
            f"Job {name!r}: limit_key returned {text[:60]!r}; a key is 1 to {MAX_LIMIT_KEY} printable "
            "characters (no newline or other control character)."
        )
    return text


def _check_examples(name: str, examples: Sequence[Example]) -> tuple[Example, ...]:
    for example in examples:
        if not (isinstance(example, dict | list | tuple) or callable(example)):
            raise ValueError(
                f"Job {name!r}: each of examples= is a dict of keyword arguments, a list of positional "
                f"ones or a function returning either, not {type(example).__name__}"
            )
    return tuple(examples)


def _check_limits(name: str, concurrency: object, rate: object, limit_key: object) -> dict[str, Any]:
    """The ``Job`` fields of its limits: ``concurrency``, ``rate`` (count, seconds) and ``limit_key``."""
    concurrency = _check_concurrency(name, concurrency, rate, limit_key)
    return {"concurrency": concurrency, "rate": _check_rate(name, rate), "limit_key": limit_key}


def _check_concurrency(name: str, concurrency: object, rate: object, limit_key: object) -> int | None:
    if limit_key is not None and not callable(limit_key):
        raise ValueError(f"@job {name!r}: limit_key takes a callable (arguments -> key), got {limit_key!r}.")
    if limit_key is not None and concurrency is None and rate is None:
        raise ValueError(f"@job {name!r}: limit_key needs concurrency= or rate=, the limits each key gets.")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"@job {name!r}: concurrency must be a positive int, got {concurrency!r}.")
    return concurrency


def _check_rate(name: str, rate: object) -> tuple[int, float] | None:
    if rate is None:
        return None
    try:
        count, _, unit = str(rate).partition("/")
        parsed = (int(count), _PERIODS[unit])
    except (ValueError, KeyError):
        raise ValueError(
            f"@job {name!r}: rate looks like '10/s', '100/m', '1000/h' or '5/d', got {rate!r}."
        ) from None
    if parsed[0] < 1:
        raise ValueError(f"@job {name!r}: rate must allow at least one start, got {rate!r}.")
    return parsed


def _check_snoozing(
    name: str, expires: float | dt.timedelta | None, max_snoozes: object
) -> tuple[float | None, int | None]:
    if max_snoozes is not None and (
        isinstance(max_snoozes, bool) or not isinstance(max_snoozes, int) or max_snoozes < 1
    ):
        raise ValueError(f"@job {name!r}: max_snoozes must be a positive int, got {max_snoozes!r}.")
    return (check_expires(expires, f"@job {name!r}") if expires is not None else None), max_snoozes


def _check_cron(name: str, fn: Callable[..., Any], cron: object, catch_up: str) -> str | None:
    if catch_up not in ("skip", "once"):
        raise ValueError(f"@job {name!r}: cron_catch_up is 'skip' or 'once', got {catch_up!r}.")
    if cron is None:
        return None
    if not isinstance(cron, str) or not croniter.is_valid(cron):
        raise ValueError(f"@job {name!r}: cron={cron!r} is not a valid cron expression.")
    try:
        inspect.signature(fn).bind()
    except TypeError:
        raise ValueError(f"@job {name!r}: a periodic job is called with no arguments.") from None
    return cron


def limits_json(paused: Iterable[str] = ()) -> str:
    """The limits of every registered name, aliases included, as the claim script reads them:
    ``{name: [concurrency, rate count, rate period, canonical name]}``, with a fifth item, true, for
    a job with ``limit_key`` (its limits hold for each key value, not for the job type), and a sixth,
    true, for the job types named in ``paused`` (current names), whose jobs the claim parks (the fifth
    is then false without ``limit_key``).

    The claim script keys its slot and rate counters and parked lists by the canonical name, so a job
    still queued under an old alias shares its limits and its pause with the jobs queued under the
    current name. A paused name this process does not know is held all the same.
    """
    held = set(paused)
    limits: dict[str, list[Any]] = {
        key: [d.concurrency or 0, d.rate[0] if d.rate else 0, d.rate[1] if d.rate else 1, d.name]
        + ([True] if d.limit_key is not None else [])
        for key, d in _registry.items()
        if d.concurrency or d.rate or d.name in held
    }
    for name in held:
        limits.setdefault(name, [0, 0, 1, name])
    for limit in limits.values():
        if limit[3] in held:
            limit[4:] = [limit[4:5] == [True], True]
    return json.dumps(limits, sort_keys=True)


def limit_scope(record: JobRecord) -> Scope | None:
    """The key whose limits an attempt of ``record``'s job counts under (see ``limit_key``), or None:
    a plain job, one queued before its type had ``limit_key``, or one this process does not know."""
    value = record.fields.get(F.LIMIT_KEY)
    if not value:  # a plain job: nothing more to look up
        return None
    definition = _registry.get(record.name)
    if definition is None or definition.limit_key is None:
        return None
    count, period = definition.rate or (0, 1.0)
    return Scope(definition.name, value.decode(errors="replace"), definition.concurrency or 0, count, period)


def _register(definition: Job[Any, Any]) -> None:
    with _lock:
        for key in (definition.name, *definition.aliases):
            current = _registry.get(key)
            same = current is not None and (
                current.func.__module__,
                current.func.__qualname__,
            ) == (definition.func.__module__, definition.func.__qualname__)
            if current is not None and not same:
                raise ValueError(
                    f"Job name {key!r} is already taken by "
                    f"{current.func.__module__}.{current.func.__qualname__}; pass a different name= or alias."
                )
        for key in (definition.name, *definition.aliases):
            _registry[key] = definition


@overload
def job(func: Callable[P, R], /) -> Job[P, R]: ...


@overload
def job(
    *,
    timeout: float,
    name: str | None = None,
    queue: str = "default",
    retry: RetryPolicy | None = None,
    permanent: tuple[type[BaseException], ...] | type[BaseException] = (),
    aliases: Sequence[str] = (),
    concurrency: int | None = None,
    rate: str | None = None,
    cron: str | None = None,
    cron_catch_up: str = "skip",
    store_result: bool = False,
    priority: int = 0,
    limit_key: Callable[..., object] | None = None,
    expires: float | dt.timedelta | None = None,
    max_snoozes: int | None = None,
    examples: Sequence[Example] = (),
) -> Callable[[Callable[P, R]], Job[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    timeout: float | None = None,
    name: str | None = None,
    queue: str = "default",
    retry: RetryPolicy | None = None,
    permanent: tuple[type[BaseException], ...] | type[BaseException] = (),
    aliases: Sequence[str] = (),
    concurrency: int | None = None,
    rate: str | None = None,
    cron: str | None = None,
    cron_catch_up: str = "skip",
    store_result: bool = False,
    priority: int = 0,
    limit_key: Callable[..., object] | None = None,
    expires: float | dt.timedelta | None = None,
    max_snoozes: int | None = None,
    examples: Sequence[Example] = (),
) -> Job[P, R] | Callable[[Callable[P, R]], Job[P, R]]:
    """Register a function as a job. ``timeout`` is required; ``retry`` defaults to ``JOBS["DEFAULT_RETRY"]``.

    ``concurrency`` and ``rate`` ("10/s") cap runs at once and starts per period (a job over either
    waits, spending no attempt), for each key with ``limit_key`` (the job's arguments -> a short str or
    int); ``cron`` (``"*/5 * * * *"``) fires it once per period (``cron_catch_up``: "skip" or "once");
    ``store_result`` keeps its JSON return value; of a queue's ready jobs the highest ``priority``
    (-100 to 100) starts first. ``expires`` (seconds or a timedelta after each enqueue) drops a run
    that has not started by then; ``max_snoozes`` caps how often it may ``Snooze`` in all (default
    ``JOBS["MAX_SNOOZES"]``); ``examples``: payloads for ``jobs_verify``. Flaws raise ValueError.
    """

    def decorate(fn: Callable[P, R]) -> Job[P, R]:
        job_name = name or f"{fn.__module__}.{fn.__qualname__}"
        _check_names(job_name, queue, aliases, retry)
        snoozing = _check_snoozing(job_name, expires, max_snoozes)
        definition = Job(
            func=fn, name=job_name, queue=queue, timeout=_check_timeout(job_name, timeout), retry=retry,
            permanent=_check_permanent(job_name, permanent), aliases=tuple(aliases),
            **_check_limits(job_name, concurrency, rate, limit_key),
            cron=_check_cron(job_name, fn, cron, cron_catch_up), cron_catch_up=cron_catch_up,
            store_result=bool(store_result), is_async=iscoroutinefunction(fn),  # marked ones too
            priority=check_priority(priority, f"@job {job_name!r}"),
            expires=snoozing[0], max_snoozes=snoozing[1], examples=_check_examples(job_name, examples),
        )  # fmt: skip
        _register(definition)
        return definition

    return decorate(func) if func is not None else decorate


def get(name: str) -> Job[Any, Any]:
    """The job registered under ``name`` or one of its aliases."""
    try:
        return _registry[name]
    except KeyError:
        raise JobNotFound(
            f"No job is registered under the name {name!r}; it will not be run. Workers know the jobs "
            "defined in an installed app's jobs.py (and the modules it imports) and in the modules "
            "listed in JOBS['IMPORT_MODULES']; manage.py check warns about a job defined elsewhere."
        ) from None


def all_jobs() -> list[Job[Any, Any]]:
    """Each registered job once (aliases fold into their job)."""
    return list({id(d): d for d in _registry.values()}.values())
