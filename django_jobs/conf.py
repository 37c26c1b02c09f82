"""The one settings object over ``settings.JOBS``, read at access time so ``override_settings`` works.

:class:`JobsSettings` is the single place a setting is declared: its field (type and default) and the
comment above it, which the documentation's settings reference repeats. :func:`problems` is the single
validation: ``manage.py check`` reports exactly what it finds.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from django_jobs.policy import RetryPolicy

MODES = ("queue", "immediate", "capture")
LOG_FORMATS = ("text", "json")
#: Durability levels of a queue's enqueues, weakest first (docs/explanation/durability.md).
FAST, REPLICATED, LEDGER = "fast", "replicated", "ledger"
LEVELS = (FAST, REPLICATED, LEDGER)
#: Bounds of the replicated level: a push never waits longer than this for its replicas.
MAX_REPLICA_TIMEOUT = 5.0


@dataclass(frozen=True)
class JobsSettings:
    """Every key of ``settings.JOBS`` with its default, typed; docs/reference/settings.md documents each."""

    # "queue": push to Redis; "immediate": run inline (at commit inside a transaction);
    # "capture": record jobs for assertions in tests.
    MODE: str = "queue"
    # Used by every @job that does not pass retry=.
    DEFAULT_RETRY: dict[str, Any] = field(
        default_factory=lambda: {"max_attempts": 5, "base": 30.0, "factor": 2.0, "max_delay": 3600.0}
    )
    # Encoded payloads larger than this raise PayloadError at enqueue.
    MAX_PAYLOAD_BYTES: int = 64 * 1024
    # Dotted paths of callables alert(dead_letter) run after a job is dead-lettered.
    ALERT_HOOKS: list[str] = field(
        default_factory=lambda: ["django_jobs.failures.alerts.log_and_mail_admins"]
    )
    # Seconds after an alert during which dead letters of the same kind are only counted; the count
    # goes out in one summary when the window closes.
    ALERT_WINDOW: float = 300
    # Seconds a running job's lease lives without a heartbeat before another runjobs takes it back.
    LEASE_SECONDS: float = 10
    # Seconds between a job's soft timeout (exception in the job) and the hard kill of its process.
    TIMEOUT_GRACE: float = 5
    # Seconds a running job whose cancel was requested has to stop by itself (polling cancel_requested())
    # before runjobs kills its process; counted from when its supervisor learns of the request.
    CANCEL_GRACE: float = 10
    # Seconds runjobs waits for the running jobs to finish after SIGTERM before handing them back.
    SHUTDOWN_GRACE: float = 25
    # How many async def jobs each work process runs at once, on its one event loop (runjobs
    # --async-jobs overrides it). 1: one job at a time, sync or async, as ever; sync jobs always run
    # one at a time per process (docs/explanation/async-jobs.md).
    ASYNC_JOBS: int = 1
    # The most jobs one claim leases for a work process when its queue has a backlog of short jobs
    # (a batch holds about 20 ms of them: a job that takes longer is claimed alone). 1: no batches.
    CLAIM_BATCH: int = 25
    # How often a job may snooze (raise or return Snooze) in all before the next snooze dead-letters it
    # (reason "snoozed"); a job's own @job(max_snoozes=...) overrides it.
    MAX_SNOOZES: int = 100
    # Seconds an idempotency key is kept; must outlive the longest retry window.
    IDEMPOTENCY_RETENTION: float = 30 * 24 * 3600
    # Seconds a finished job's hash stays in Redis; a duplicate push of its id inside this window is a no-op.
    FINISHED_TTL: int = 3600
    # Socket timeouts (seconds) for the web side's Redis connections, so a frozen Redis cannot hang requests.
    REDIS_SOCKET_TIMEOUT: float = 2.0
    # Seconds between the worker's maintenance passes (promote due jobs, reap leases, relay the outbox).
    MAINTENANCE_INTERVAL: float = 0.25
    # Periodic jobs: {job name: cron expression (schedule or reschedule it) or None (disable it)}.
    CRON: dict[str, str | None] = field(default_factory=dict)
    # "text" or "json": the format of the one log line per job outcome.
    LOG_FORMAT: str = "text"
    # Jobs per second a bulk dead-letter requeue releases: later jobs wait in the scheduled set.
    REQUEUE_RATE: float = 20
    # redact(data, *, job_name) -> data (or its dotted path), applied to payloads before the admin or
    # the deadletters command shows them.
    REDACT: str | Callable[..., Any] = "django_jobs.failures.redaction.mask_secrets"
    # Modules that define jobs outside an installed app's jobs.py, imported at start-up with the
    # jobs modules, so runjobs knows every job the web process can enqueue.
    IMPORT_MODULES: list[str] = field(default_factory=list)
    # runjobs refuses to start on a Redis that evicts keys when full (maxmemory-policy other than
    # noeviction, with maxmemory set): evicted jobs vanish. True starts it anyway, with a warning.
    ALLOW_EVICTION: bool = False
    # The durability level of each queue's enqueues ("ledger", "replicated" or "fast"); queues not
    # listed get DEFAULT_DURABILITY. "ledger" loses nothing Redis loses alone
    # (docs/explanation/durability.md).
    DURABILITY: dict[str, str] = field(default_factory=dict)
    DEFAULT_DURABILITY: str = LEDGER
    # "replicated": a push returns once Redis' WAIT confirms this many replicas have it ...
    REPLICAS: int = 1
    # ... or after this many seconds (at most MAX_REPLICA_TIMEOUT, below REDIS_SOCKET_TIMEOUT); then the
    # job keeps an outbox row, which the relay re-pushes and prunes only once replicas confirm it.
    REPLICA_TIMEOUT: float = 0.5
    # Seconds between the ledger's full reconciliations (each one costs O(pending ledger rows)); one also
    # runs as soon as runjobs sees its Redis primary change.
    LEDGER_SWEEP_INTERVAL: float = 10
    # Seconds between runjobs' sweeps of the pending members of open batches (each costs O(pending
    # members)): the longest a member's end that no event reported (a worker killed at the wrong instant,
    # a cancelled waiting job, a requeued dead letter) waits to be counted. Keep it well below FINISHED_TTL.
    BATCH_SWEEP_INTERVAL: float = 10
    # Seconds a batch that ended (and whose callbacks ran or were skipped) is kept, with its members and
    # callbacks, before runjobs deletes it.
    BATCH_RETENTION: float = 30 * 24 * 3600
    # Keep a row per ended job (succeeded, dead, cancelled, expired) in the database, for the job
    # browser's history: each process writes its rows in one statement every 5 s (or each 5,000).
    HISTORY: bool = True
    # Seconds a history row is kept before runjobs deletes it (in batches).
    HISTORY_RETENTION: float = 3 * 24 * 3600
    # The admin user the commands that change something (jobs_cancel, jobs_pause, jobs_resume, deadletters
    # requeue and discard) act as, for the audit log, when no --user is given; None: the login name.
    AUDIT_USER: str | None = None
    # The most crash points verify_crash_safe (and manage.py jobs_verify) tries per job and payload:
    # past it, a sample (every commit and declared effect first, the statements spread evenly).
    VERIFY_CRASH_POINTS: int = 30

    def durability(self, queue: str) -> str:
        """The durability level of ``queue``'s enqueues."""
        return self.DURABILITY.get(queue, self.DEFAULT_DURABILITY)

    def default_retry(self) -> RetryPolicy:
        """The policy of every job that passes no ``retry=``; raises ValueError or TypeError if malformed."""
        from django_jobs.policy import RetryPolicy

        return RetryPolicy(**self.DEFAULT_RETRY)


_FIELDS = {spec.name: spec for spec in dataclasses.fields(JobsSettings)}
_DEFAULT = JobsSettings()

#: Every key of ``settings.JOBS`` with its default (the fields of :class:`JobsSettings`).
DEFAULTS: dict[str, Any] = {name: getattr(_DEFAULT, name) for name in _FIELDS}

#: Settings with a check of their own, which the generic numeric check leaves alone.
COUNTS = ("MAX_SNOOZES", "ASYNC_JOBS", "CLAIM_BATCH")
#: More async jobs at once in one work process than this is a typo, not a plan: each is a thread.
MAX_ASYNC_JOBS = 1000
#: A batch past this would hold jobs back from other work processes for no gain: the round trip it
#: saves is already a few percent of each job.
MAX_CLAIM_BATCH = 100

#: Positive amounts (seconds, bytes, a rate): derived from the fields, so a new one is validated too.
NUMERIC = [name for name, default in DEFAULTS.items() if type(default) in (int, float) and name not in COUNTS]


def _module_paths(modules: Any) -> list[str]:
    if not isinstance(modules, list | tuple) or not all(isinstance(m, str) for m in modules):
        # Read at start-up, before any system check could report it: say what is wrong right here.
        raise ImproperlyConfigured(f"JOBS['IMPORT_MODULES'] must be a list of module paths, got {modules!r}.")
    return list(modules)


def _count(value: Any) -> int:
    """A whole number as given (a float like 2.5 is refused, not cut to 2)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def _username(value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise TypeError(f"expected a username or None, got {value!r}")
    return value


#: How a given value becomes the field's type; fields not listed keep the value as given.
_COERCE: dict[str, Callable[[Any], Any]] = {
    **{name: type(DEFAULTS[name]) for name in (*NUMERIC, "MODE", "LOG_FORMAT", "DEFAULT_DURABILITY")},
    **{name: type(DEFAULTS[name]) for name in ("DEFAULT_RETRY", "ALERT_HOOKS", "CRON", "DURABILITY")},
    "MAX_SNOOZES": _count,
    "ASYNC_JOBS": _count,
    "CLAIM_BATCH": _count,
    "IMPORT_MODULES": _module_paths,
    "ALLOW_EVICTION": bool,
    "AUDIT_USER": _username,
}
# An integer default does not make its setting integral where the code always worked in floats.
_COERCE.update({name: float for name, spec in _FIELDS.items() if spec.type == "float"})


#: The ``BACKEND`` of a ``settings.TASKS`` entry served by django_jobs (Django's Tasks framework).
TASKS_BACKEND = "django_jobs.tasks.JobsBackend"


def task_backend_aliases() -> list[str]:
    """The aliases of ``settings.TASKS`` whose backend is django_jobs': with one, every process imports
    the installed apps' ``tasks`` modules at start-up too, so the worker knows their tasks."""
    given = getattr(settings, "TASKS", None)
    if not isinstance(given, dict):
        return []
    return [alias for alias, entry in given.items() if isinstance(entry, dict) and _ours(entry)]


def _ours(entry: dict[str, Any]) -> bool:
    return entry.get("BACKEND") == TASKS_BACKEND


def _given() -> dict[str, Any]:
    given = getattr(settings, "JOBS", None) or {}
    return given if isinstance(given, dict) else {}


def build(given: dict[str, Any]) -> tuple[JobsSettings, dict[str, Exception]]:
    """The settings object for ``given``, and why each value that could not be read was refused.

    A refused value is raised when that setting is read (so one bad key does not stop the rest, and
    ``manage.py check`` can still run and report it).
    """
    values: dict[str, Any] = {}
    errors: dict[str, Exception] = {}
    for name in _FIELDS.keys() & given.keys():
        coerce = _COERCE.get(name)
        try:
            values[name] = coerce(given[name]) if coerce else given[name]
        except (TypeError, ValueError, OverflowError, ImproperlyConfigured) as exc:
            errors[name] = exc
    return JobsSettings(**values), errors


class _Live:
    """``jobs_settings``: each setting read from the settings object of the current ``settings.JOBS``.

    The object is rebuilt only when ``settings.JOBS`` is another dict (``override_settings`` swaps it),
    so the worker's hot loop pays an identity check, not a rebuild.
    """

    _cache: tuple[object, JobsSettings, dict[str, Exception]] = (object(), _DEFAULT, {})

    def current(self) -> JobsSettings:
        return self._current()[0]

    def _current(self) -> tuple[JobsSettings, dict[str, Exception]]:
        jobs = getattr(settings, "JOBS", None)
        source, built, errors = self._cache
        if source is not jobs:
            built, errors = build(_given())
            self._cache = (jobs, built, errors)
        return built, errors

    def _read(self, name: str) -> Any:
        built, errors = self._current()
        if name in errors:
            raise errors[name]
        return getattr(built, name)

    def default_retry(self) -> RetryPolicy:
        return self.current().default_retry()

    def durability(self, queue: str) -> str:
        return self.current().durability(queue)


def _reader(name: str) -> property:
    def read(live: _Live) -> Any:
        return live._read(name)

    return property(read, doc=f"JOBS[{name!r}]")


for _name in _FIELDS:  # one generated property per field: no fallback lookup in the hot loop
    setattr(_Live, _name, _reader(_name))


jobs_settings = cast(JobsSettings, _Live())


def current() -> JobsSettings:
    """The settings object of the current ``settings.JOBS``, for a loop that reads it many times."""
    return cast(_Live, jobs_settings).current()


class Problem(NamedTuple):
    """One thing wrong with ``settings.JOBS``, under the system check id that reports it."""

    id: str
    msg: str
    hint: str


def problems() -> list[Problem]:
    """Everything wrong with ``settings.JOBS`` that can be told without importing user code."""
    given = getattr(settings, "JOBS", {})
    if not isinstance(given, dict):
        hint = "docs/reference/settings.md lists its keys."
        return [Problem("django_jobs.E005", "settings.JOBS must be a dict.", hint)]
    return [
        *_unknown_keys(given),
        *_choice_problem(
            given, "MODE", MODES, Problem("django_jobs.E007", "", f"Use one of {', '.join(MODES)}.")
        ),
        *_retry_problems(given),
        *_numeric_problems(given),
        *_choice_problem(
            given, "LOG_FORMAT", LOG_FORMATS, Problem("django_jobs.E010", "", 'Use "text" or "json".')
        ),
        *_cron_shape_problems(given),
        *_durability_problems(given),
        *_snooze_problems(given),
        *_async_jobs_problems(given),
        *_claim_batch_problems(given),
        *_batch_problems(given),
        *_unreadable(given),
    ]


def _unknown_keys(given: dict[str, Any]) -> list[Problem]:
    found = []
    for key in given:
        if key in _FIELDS:
            continue
        close = next(iter(difflib.get_close_matches(str(key), _FIELDS, n=1)), None)
        hint = f"Did you mean {close!r}?" if close else f"Known keys: {', '.join(_FIELDS)}."
        found.append(Problem("django_jobs.E006", f"settings.JOBS has an unknown key {key!r}.", hint))
    return found


def _choice_problem(
    given: dict[str, Any], key: str, choices: tuple[str, ...], problem: Problem
) -> list[Problem]:
    """``problem`` (its message completed with the value) if ``key`` is not one of ``choices``."""
    value = str(given.get(key, DEFAULTS[key]))
    return [] if value in choices else [problem._replace(msg=f"JOBS[{key!r}] is {value!r}.")]


def _retry_problems(given: dict[str, Any]) -> list[Problem]:
    from django_jobs.policy import RetryPolicy

    try:
        RetryPolicy(**dict(given.get("DEFAULT_RETRY", DEFAULTS["DEFAULT_RETRY"])))
    except (TypeError, ValueError) as exc:
        msg = f"JOBS['DEFAULT_RETRY'] is not a valid retry policy: {exc}"
        return [Problem("django_jobs.E008", msg, "Keys: max_attempts, base, factor, max_delay.")]
    return []


def _numeric_problems(given: dict[str, Any]) -> list[Problem]:
    found = []
    for key in NUMERIC:
        value = given.get(key, DEFAULTS[key])
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            msg = f"JOBS[{key!r}] must be a positive number, got {value!r}."
            found.append(Problem("django_jobs.E009", msg, f"The default is {DEFAULTS[key]!r}."))
    return found


def _unreadable(given: dict[str, Any]) -> list[Problem]:
    """Values the settings object refuses to read that no check above names more precisely."""
    _, errors = build(given)
    covered = {*NUMERIC, *COUNTS, "DEFAULT_RETRY", "CRON", "DURABILITY"}
    return [
        Problem(
            "django_jobs.E014", f"JOBS[{key!r}] cannot be read: {exc}", f"The default is {DEFAULTS[key]!r}."
        )
        for key, exc in errors.items()
        if key not in covered
    ]


def _snooze_problems(given: dict[str, Any]) -> list[Problem]:
    value = given.get("MAX_SNOOZES", DEFAULTS["MAX_SNOOZES"])
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return []
    msg = f"JOBS['MAX_SNOOZES'] must be a whole number of snoozes, at least 1, got {value!r}."
    hint = f"The default is {DEFAULTS['MAX_SNOOZES']}; a job's own @job(max_snoozes=N) overrides it."
    return [Problem("django_jobs.E025", msg, hint)]


def _count_problems(given: dict[str, Any], name: str, most: int, check: str, hint: str) -> list[Problem]:
    """A count setting (``COUNTS``) that must be a whole number from 1 to ``most``."""
    value = given.get(name, DEFAULTS[name])
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most:
        return []
    msg = f"JOBS['{name}'] must be a whole number from 1 to {most}, got {value!r}."
    return [Problem(check, msg, hint)]


def _async_jobs_problems(given: dict[str, Any]) -> list[Problem]:
    hint = "1 runs one job at a time per work process; 10 to 50 suits jobs that mostly await I/O."
    return _count_problems(given, "ASYNC_JOBS", MAX_ASYNC_JOBS, "django_jobs.E036", hint)


def _claim_batch_problems(given: dict[str, Any]) -> list[Problem]:
    hint = f"The default is {DEFAULTS['CLAIM_BATCH']}; 1 claims one job at a time."
    return _count_problems(given, "CLAIM_BATCH", MAX_CLAIM_BATCH, "django_jobs.E037", hint)


def _cron_shape_problems(given: dict[str, Any]) -> list[Problem]:
    if isinstance(given.get("CRON", {}), dict):
        return []
    hint = "{job name: cron expression or None}"
    return [Problem("django_jobs.E011", "JOBS['CRON'] must be a dict.", hint)]


def _batch_problems(given: dict[str, Any]) -> list[Problem]:
    """A batch sweep so rare that a member's end could leave Redis (FINISHED_TTL) before it looks."""
    interval, ttl = (given.get(k, DEFAULTS[k]) for k in ("BATCH_SWEEP_INTERVAL", "FINISHED_TTL"))
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (interval, ttl))
    if not numbers or not all(math.isfinite(v) and v > 0 for v in (interval, ttl)) or interval <= ttl / 2:
        return []  # E009 reports what is not a positive number
    msg = (
        f"JOBS['BATCH_SWEEP_INTERVAL'] is {interval!r}, over half of FINISHED_TTL ({ttl!r}): a batch member "
        "whose end no event reported can leave Redis before a sweep sees it, and count as expired."
    )
    return [Problem("django_jobs.W031", msg, "Keep it well below FINISHED_TTL; the default is 10.")]


def _durability_problems(given: dict[str, Any]) -> list[Problem]:
    """An unknown level, or a replica wait that could outlast a request's Redis socket timeout."""
    levels = given.get("DURABILITY", {})
    if not isinstance(levels, dict):
        return [Problem("django_jobs.E015", "JOBS['DURABILITY'] must be a dict.", "{queue: level}")]
    hint = f"Use one of {', '.join(LEVELS)}."
    found = [
        Problem("django_jobs.E015", f"JOBS['DURABILITY'][{queue!r}] is {level!r}.", hint)
        for queue, level in levels.items()
        if level not in LEVELS
    ]
    found += _choice_problem(given, "DEFAULT_DURABILITY", LEVELS, Problem("django_jobs.E015", "", hint))
    used = REPLICATED in (given.get("DEFAULT_DURABILITY", DEFAULTS["DEFAULT_DURABILITY"]), *levels.values())
    timeout, socket_timeout = (given.get(k, DEFAULTS[k]) for k in ("REPLICA_TIMEOUT", "REDIS_SOCKET_TIMEOUT"))
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (timeout, socket_timeout))
    if used and numbers and not timeout < min(socket_timeout, MAX_REPLICA_TIMEOUT + 1e-9):
        msg = f"JOBS['REPLICA_TIMEOUT'] is {timeout!r}: a push must not wait that long for its replicas."
        hint = (
            f"Keep it at most {MAX_REPLICA_TIMEOUT:g} s and below REDIS_SOCKET_TIMEOUT ({socket_timeout!r})."
        )
        found.append(Problem("django_jobs.E017", msg, hint))
    replicas = given.get("REPLICAS", DEFAULTS["REPLICAS"])
    if isinstance(replicas, float) and not replicas.is_integer():
        found.append(
            Problem("django_jobs.E009", "JOBS['REPLICAS'] must be a whole number.", "The default is 1.")
        )
    return found
