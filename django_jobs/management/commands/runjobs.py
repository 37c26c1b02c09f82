"""``manage.py runjobs``: parse arguments, then hand over to the supervisor."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis import Redis
from redis.exceptions import RedisError

from django_jobs.conf import MAX_ASYNC_JOBS, jobs_settings
from django_jobs.core.connections import cluster_mode
from django_jobs.exceptions import ConfigurationError
from django_jobs.management.arguments import real, whole
from django_jobs.ops.eviction import eviction_policy
from django_jobs.telemetry import logs
from django_jobs.worker import build_supervisor, metrics_server
from django_jobs.worker.process import BURST_WAIT

logger = logging.getLogger("django_jobs.worker")

#: More work processes than this on one host is a typo, not a plan: each one is a Django process.
MAX_CONCURRENCY = 1024


class Command(BaseCommand):
    help = "Run django_jobs workers: retries, timeouts, leases and dead letters included."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "queues", nargs="*", help="Queues to serve, highest priority first (default: all)."
        )
        parser.add_argument(
            "--concurrency",
            type=whole(1, MAX_CONCURRENCY),
            default=1,
            help="Work processes to run (default 1).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Exit once the queues are empty and no retry or delayed job is due within --burst-wait.",
        )
        parser.add_argument(
            "--burst-wait",
            type=real(0),
            default=BURST_WAIT,
            metavar="SECONDS",
            help=f"With --burst: stay for retries and delayed jobs due within SECONDS ({BURST_WAIT:g}).",
        )
        parser.add_argument(
            "--max-jobs",
            type=whole(0),
            default=0,
            metavar="N",
            help="Replace each work process by a fresh one after N jobs, to bound memory growth (0: never).",
        )
        parser.add_argument(
            "--async-jobs",
            type=whole(1, MAX_ASYNC_JOBS),
            default=None,
            metavar="N",
            help="async def jobs each work process runs at once, on one event loop (default: "
            "JOBS['ASYNC_JOBS'], 1). Sync jobs still run one at a time per process.",
        )
        parser.add_argument(
            "--metrics-port",
            type=whole(0, 65535),
            help="Serve Prometheus metrics of all work processes, combined, on this port (0: any free one).",
        )
        parser.add_argument(
            "--metrics-addr",
            default="127.0.0.1",
            help="Address the metrics port binds (default 127.0.0.1, this host only; 0.0.0.0: every "
            "interface, for a Prometheus on another host).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logs.console_defaults(options["verbosity"])
        if settings.DEBUG:
            logger.warning(
                "DEBUG=True: django_jobs resets the query log after each job, but DEBUG slows workers."
            )
        try:
            supervisor = build_supervisor(
                options["queues"],
                concurrency=options["concurrency"],
                burst=options["burst"],
                burst_wait=options["burst_wait"],
                max_jobs=options["max_jobs"],
                async_jobs=options["async_jobs"],
            )
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
        for server in supervisor.servers:
            self._refuse_unsafe(server.connection)
        with contextlib.ExitStack() as stack:
            if options["metrics_port"] is not None:
                addr, port = options["metrics_addr"], options["metrics_port"]
                try:
                    names = [server.name for server in supervisor.servers]
                    stack.enter_context(metrics_server.serving(addr, port, supervisor.queues, names))
                except OSError as exc:
                    raise CommandError(f"Cannot serve metrics on {addr}:{port}: {exc}") from exc
            code = supervisor.run()
        if code:
            raise CommandError(f"runjobs stopped with a fatal error (exit code {code}).", returncode=code)

    @staticmethod
    def _refuse_unsafe(connection: Redis) -> None:
        """Stop before taking any job from a Redis that may evict them, unless the operator accepts
        it, or from a Redis Cluster node, where no transition can run."""
        try:
            found = eviction_policy(connection)
            clustered = cluster_mode(connection)
        except RedisError as exc:  # runjobs waits for Redis; the policy is checked at the next start
            logger.warning("Could not read Redis's maxmemory-policy at start-up: %s", exc)
            return
        if clustered:
            raise CommandError(
                f"Redis {found.server} runs in cluster mode, which cannot hold RQ's keys: give the queues "
                "standalone Redis servers (see docs/howto/scale-out.md, 'Queues on several Redis servers')."
            )
        if found.evicts and not jobs_settings.ALLOW_EVICTION:
            raise CommandError(f"{found.describe()} Or set JOBS['ALLOW_EVICTION'] = True to run anyway.")
        if found.evicts or found.unknown:
            logger.warning("%s", found.describe())
