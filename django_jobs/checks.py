"""System checks: misconfiguration is reported by ``manage.py check``, each with a hint."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from croniter import croniter
from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.urls import get_resolver
from django.utils.module_loading import import_string
from redis import Redis
from redis.exceptions import RedisError

from django_jobs import conf
from django_jobs.conf import jobs_settings
from django_jobs.core import registry
from django_jobs.core.connections import cluster_mode, queue_configs, serializer_problem, server_connections
from django_jobs.exceptions import JobNotFound
from django_jobs.ops.eviction import eviction_policy
from django_jobs.store import read


def _installed() -> list[str]:
    return list(settings.INSTALLED_APPS)


def _app_index(name: str) -> int | None:
    for i, entry in enumerate(_installed()):
        if entry == name or entry.startswith(f"{name}.apps."):
            return i
    return None


@register(Tags.compatibility)
def check_apps(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    if _app_index("django_rq") is None:
        problems.append(
            Error(
                "django_rq is not in INSTALLED_APPS.",
                hint='Add "django_rq" to INSTALLED_APPS; django_jobs uses its RQ_QUEUES.',
                id="django_jobs.E001",
            )
        )
    ours, theirs = _app_index("django_jobs"), _app_index("django_extensions")
    if ours is not None and theirs is not None and theirs < ours:
        problems.append(
            Warning(
                "django_extensions comes before django_jobs in INSTALLED_APPS, so its own "
                "runjobs command shadows django_jobs' runjobs.",
                hint='List "django_jobs" before "django_extensions".',
                id="django_jobs.W002",
            )
        )
    return problems


def _queue_problems() -> list[CheckMessage]:
    queues = getattr(settings, "RQ_QUEUES", None)
    if not isinstance(queues, dict) or not queues:
        return [
            Error(
                "settings.RQ_QUEUES defines no queue.",
                hint='Add at least RQ_QUEUES = {"default": {"URL": "redis://localhost:6379/0", '
                '"SERIALIZER": "rq.serializers.JSONSerializer"}}.',
                id="django_jobs.E002",
            )
        ]
    problems: list[CheckMessage] = []
    for name, config in queues.items():
        problem = serializer_problem(config)
        if problem is not None:
            problems.append(
                Error(
                    f"Queue {name!r} would not decode jobs with JSON: {problem}.",
                    hint=f'Set RQ_QUEUES[{name!r}]["SERIALIZER"] = "rq.serializers.JSONSerializer": '
                    "django-rq's views decode jobs with it, and pickle runs code from Redis.",
                    id="django_jobs.E003",
                )
            )
    for definition in registry.all_jobs():
        if definition.queue not in queues:
            problems.append(
                Error(
                    f"Job {definition.name!r} uses queue {definition.queue!r}, which is not in RQ_QUEUES.",
                    hint=f"Add {definition.queue!r} to RQ_QUEUES or pass queue= one of "
                    f"{', '.join(sorted(queues))}.",
                    id="django_jobs.E004",
                )
            )
    return [*problems, *_durability_queue_problems(queues)]


def _durability_queue_problems(queues: dict[str, Any]) -> list[CheckMessage]:
    """A level for a queue RQ_QUEUES does not define (a typo would leave the real one at the default)."""
    given = getattr(settings, "JOBS", None)
    levels = given.get("DURABILITY", {}) if isinstance(given, dict) else {}
    return [
        Error(
            f"JOBS['DURABILITY'] names queue {name!r}, which is not in RQ_QUEUES.",
            hint=f"Use one of {', '.join(sorted(queues))}.",
            id="django_jobs.E016",
        )
        for name in (levels if isinstance(levels, dict) else {})
        if name not in queues
    ]


def _jobs_setting_problems() -> list[CheckMessage]:
    """What the settings object's own validation finds, plus what needs the registry or an import."""
    found = conf.problems()
    messages: list[CheckMessage] = [
        (Warning if ".W" in p.id else Error)(p.msg, hint=p.hint, id=p.id) for p in found
    ]
    if any(p.id == "django_jobs.E005" for p in found):
        return messages
    cron_readable = not any(p.id == "django_jobs.E011" for p in found)
    cron = _cron_problems() if cron_readable else []
    return [*messages, *cron, *_redact_problems(), *_alert_hook_problems()]


def _redact_problems() -> list[CheckMessage]:
    problem = _callable_problem(jobs_settings.REDACT)
    if problem:
        return [Error(f"JOBS['REDACT'] cannot be used: {problem}.",
                      hint="A callable redact(data, *, job_name) -> data, or its dotted path.",
                      id="django_jobs.E013")]  # fmt: skip
    return []


def _alert_hook_problems() -> list[CheckMessage]:
    """A hook that cannot be imported would fail only when a job is dead-lettered: a silent alert.
    A value that cannot be read as a list is E014's."""
    try:
        hooks = jobs_settings.ALERT_HOOKS
    except TypeError:
        return []
    return [
        Error(
            f"JOBS['ALERT_HOOKS'][{n}] cannot be used: {problem}.",
            hint="A callable alert(dead_letter), or its dotted path, such as "
            "'django_jobs.failures.alerts.log_and_mail_admins'.",
            id="django_jobs.E035",
        )
        for n, hook in enumerate(hooks)
        if (problem := _callable_problem(hook))
    ]


def _callable_problem(hook: object) -> str:
    """Why a setting's callable, or its dotted path, cannot be called; empty if it can."""
    try:
        resolved = import_string(hook) if isinstance(hook, str) else hook
    except ImportError as exc:
        return str(exc)
    return "" if callable(resolved) else f"{hook!r} is not callable"


def _cron_problems() -> list[CheckMessage]:
    found: list[CheckMessage] = []
    for name, expression in jobs_settings.CRON.items():
        try:
            registry.get(name)
        except JobNotFound:
            found.append(
                Error(
                    f"JOBS['CRON'] names {name!r}, which is not a registered job.",
                    hint="Use the job's name= (see @job).",
                    id="django_jobs.E011",
                )
            )
        if expression is not None and not (isinstance(expression, str) and croniter.is_valid(expression)):
            found.append(
                Error(
                    f"JOBS['CRON'][{name!r}] = {expression!r} is not a cron expression.",
                    hint='Five fields, or six with seconds last, e.g. "*/5 * * * *"; None disables.',
                    id="django_jobs.E012",
                )
            )
    return found


def _database_problems() -> list[CheckMessage]:
    problems: list[CheckMessage] = []
    databases: dict[str, dict[str, Any]] = settings.DATABASES
    for alias, config in databases.items():
        if (
            "sqlite" in config.get("ENGINE", "")
            and config.get("OPTIONS", {}).get("transaction_mode") != "IMMEDIATE"
        ):
            problems.append(
                Warning(
                    f"Database {alias!r} is SQLite without transaction_mode='IMMEDIATE'; several worker "
                    "processes will fail with 'database is locked'.",
                    hint=f'Set DATABASES[{alias!r}]["OPTIONS"]["transaction_mode"] = "IMMEDIATE".',
                    id="django_jobs.W001",
                )
            )
    return problems


@register()
def check_redis_servers(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Per Redis server of ``RQ_QUEUES``: warn about one that may evict queued jobs or that a foreign
    worker (an rqworker) serves, refuse a Redis Cluster node. One that does not answer is left to
    jobs_health."""
    problems: list[CheckMessage] = []
    try:
        grouped = server_connections(sorted(queue_configs()))
    except Exception:  # a malformed RQ_QUEUES entry: the queue checks report it; this one must not crash
        return problems
    for names, connection in grouped:
        try:
            found, clustered = eviction_policy(connection), cluster_mode(connection)
        except RedisError:
            continue
        if not clustered:  # a cluster node answers no key of ours: the cluster error says enough
            problems += _foreign_problems(connection, names)
        if found.evicts or found.unknown:
            problems.append(
                Warning(
                    found.describe(),
                    hint="CONFIG SET maxmemory-policy noeviction (and in redis.conf); on a managed Redis, "
                    "its parameter group. runjobs refuses an evicting Redis unless JOBS['ALLOW_EVICTION'].",
                    id="django_jobs.W011" if found.unknown else "django_jobs.W010",
                )
            )
        if clustered:
            problems.append(_cluster_problem(names, found.server))
    return problems


def _foreign_problems(connection: Redis, names: list[str]) -> list[CheckMessage]:
    try:
        return [_foreign_problem(worker) for worker in read.foreign_workers(connection, names)]
    except RedisError:  # left to jobs_health, as a server that does not answer is
        return []


def _foreign_problem(worker: read.Worker) -> CheckMessage:
    return Warning(
        f"A foreign worker, {worker.name} (pid {worker.pid or '?'} on {worker.hostname or '?'}), serves "
        f"{', '.join(worker.queues)}: an rqworker fails every django_jobs job it takes.",
        hint="Stop it: runjobs runs django_jobs jobs, and moves those it failed into the dead letters.",
        id="django_jobs.W012",
    )


def _cluster_problem(names: list[str], server: str) -> CheckMessage:
    return Error(
        f"Queue(s) {', '.join(names)} live on a Redis in cluster mode ({server}): a job's keys and its "
        "queue's hash to different slots, so every push and claim fails.",
        hint="Give each group of queues a standalone Redis (with Sentinel for failover); one runjobs serves "
        "queues on several servers (docs/howto/scale-out.md: 'Queues on several Redis servers').",
        id="django_jobs.E034",
    )


@register()
def check_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    return [*_queue_problems(), *_jobs_setting_problems(), *_database_problems()]


def _startup_modules() -> list[str]:
    """The job modules runjobs imports at start-up (their submodules count too): the ``tasks`` modules
    as well when ``settings.TASKS`` names django_jobs' backend."""
    kinds = ("jobs", "tasks") if conf.task_backend_aliases() else ("jobs",)
    discovered = (f"{config.name}.{kind}" for config in apps.get_app_configs() for kind in kinds)
    return [*discovered, *jobs_settings.IMPORT_MODULES]


def _known_to_workers(definition: registry.Job[Any, Any], discovered: frozenset[str]) -> bool:
    module = definition.func.__module__
    prefixes = _startup_modules()
    return definition.name in discovered or any(module == p or module.startswith(f"{p}.") for p in prefixes)


@register()
def check_job_modules(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """A job the web process registered but runjobs never imports is dead-lettered as unregistered."""
    with contextlib.suppress(Exception):  # views import job modules; a broken URLconf is Django's to report
        get_resolver().url_patterns  # noqa: B018  imported for its side effect
    discovered: frozenset[str] = getattr(apps.get_app_config("django_jobs"), "discovered", frozenset())
    return [
        Warning(
            f"Job {definition.name!r} is defined in {definition.func.__module__}, which is not among the "
            "modules runjobs imports at start-up (installed apps' jobs modules, their tasks modules with "
            "the Django Tasks backend, and JOBS['IMPORT_MODULES']): a worker that has not happened to "
            "import it dead-letters the job as unregistered.",
            hint=f"Move it to an installed app's jobs.py (or a module jobs.py imports), or add "
            f"{definition.func.__module__!r} to JOBS['IMPORT_MODULES'].",
            obj=definition.func,
            id="django_jobs.W004",
        )
        for definition in registry.all_jobs()
        if not _known_to_workers(definition, discovered)
    ]
