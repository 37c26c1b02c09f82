"""What every benchmark needs: a private Redis, the database, timed subprocesses, Redis counters.

Nothing here touches a shared Redis: :class:`PrivateRedis` starts its own ``redis-server`` on a
free loopback port, without persistence, and stops it at the end.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
JSON_SERIALIZER = "rq.serializers.JSONSerializer"


class BenchError(RuntimeError):
    """A benchmark could not produce a trustworthy number (a worker failed, jobs went missing)."""


def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens on it on 127.0.0.1, else a port the kernel picks."""
    for port in (preferred, 0):
        with socket.socket() as sock:
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_REUSEADDR, 1
            )  # as redis-server binds; a listener still fails
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise BenchError("no free loopback port")


class PrivateRedis:
    """A ``redis-server`` of our own: loopback only, no RDB, no AOF, its files in ``workdir``."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir, self.port = workdir, port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self.client = Redis(host="127.0.0.1", port=port)

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                "--save", "", "--appendonly", "no", "--dir", str(self.workdir),
                "--logfile", str(self.workdir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"redis-server exited at start; see {self.workdir / 'redis.log'}")
            with contextlib.suppress(Exception):
                if self.client.ping():
                    return
            time.sleep(0.05)
        raise BenchError("redis-server did not answer within 10 s")

    def stop(self) -> None:
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])


def ensure_postgres_database(name: str) -> None:
    """Create the benchmark's PostgreSQL database if it does not exist yet."""
    import psycopg

    conninfo = (
        f"host={os.environ.get('PGHOST', '127.0.0.1')} port={os.environ.get('PGPORT', '5432')} "
        f"user={os.environ.get('PGUSER', 'postgres')} dbname=postgres"
    )
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')


# --- subprocesses --------------------------------------------------------------------------------


def manage(*args: str) -> list[str]:
    """``manage.py <args>`` for the benchmark project (``python -m django`` with its settings)."""
    return [PYTHON, "-m", "django", *args]


@dataclass
class Runner:
    """Starts management commands of the benchmark project with its environment; logs go to files."""

    env: dict[str, str]
    logdir: Path
    counter: int = 0
    logs: list[Path] = field(default_factory=list)

    def _log(self, name: str) -> Path:
        self.counter += 1
        path = self.logdir / f"{self.counter:03d}-{name}.log"
        self.logs.append(path)
        return path

    def count_lines(self, command: str, text: str) -> int:
        """Lines containing ``text`` in the logs of every ``command`` run so far."""
        found = 0
        for path in self.logs:
            if path.name.endswith(f"-{command}.log") and path.exists():
                found += sum(text in line for line in path.read_text(errors="replace").splitlines())
        return found

    def start(
        self, argv: Sequence[str], env: dict[str, str] | None = None, name: str = ""
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """Start ``argv`` (a management command unless ``name`` says what it is), with ``env`` on top
        of the benchmark's environment."""
        log = self._log(name or argv[3])
        with log.open("wb") as out:
            process = subprocess.Popen(
                list(argv),
                cwd=REPO,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout can stop it with its children
            )
        return process, log

    def timed(self, argv: Sequence[str], timeout: float) -> float:
        """Run a command to completion; returns its wall time from spawn to exit."""
        return self.accounted(argv, timeout).wall

    def accounted(self, argv: Sequence[str], timeout: float) -> Usage:
        """Run a command to completion; returns its wall time and the CPU time of its process tree.

        Once the process has exited, its zombie still shows its own CPU time in ``/proc/<pid>/stat``;
        then ``wait4`` reaps it and gives the whole tree's: its own and that of every child it reaped
        (the work processes of ``runjobs``)."""
        started = time.perf_counter()
        process, log = self.start(argv)
        pidfd = os.pidfd_open(process.pid)  # readable once the process has exited, before it is reaped
        try:
            exited, _, _ = select.select([pidfd], [], [], timeout)
        finally:
            os.close(pidfd)
        if not exited:
            stop(process)
            raise BenchError(f"{' '.join(argv[3:])} did not finish within {timeout:.0f} s; see {log}")
        own = cpu_seconds(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = code = os.waitstatus_to_exitcode(status)
        elapsed = time.perf_counter() - started
        if code != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise BenchError(f"{' '.join(argv[3:])} exited with {code}:\n{tail}")
        return Usage(elapsed, own, usage.ru_utime + usage.ru_stime)


@dataclass(frozen=True)
class Usage:
    """A finished command: wall seconds, and CPU seconds (user + system) of the process itself and of
    its whole tree (itself and the children it reaped)."""

    wall: float
    own: float
    tree: float


def stop(process: subprocess.Popen[bytes], grace: float = 10) -> None:
    """SIGTERM the process group we started, then SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _parents() -> dict[int, int]:
    """Every process: pid -> parent pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may contain spaces: the ppid follows the last ")"
        found[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    return found


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid``."""
    return sorted(child for child, parent in _parents().items() if parent == pid)


def tree(roots: Sequence[int]) -> list[int]:
    """``roots`` and every descendant of them still running."""
    parents = _parents()
    found, frontier = [], [r for r in roots if r in parents]
    while frontier:
        found += frontier
        frontier = [child for child, parent in parents.items() if parent in frontier]
    return found


def tree_rss_mib(roots: Sequence[int]) -> tuple[int, float]:
    """How many processes ``roots`` and their descendants are, and their VmRSS summed in MiB (a
    process gone meanwhile counts 0)."""
    pids, total = tree(roots), 0.0
    for pid in pids:
        with contextlib.suppress(OSError, BenchError):  # exited, or a zombie (no VmRSS)
            total += rss_mib(pid)
    return len(pids), total


def rss_mib(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def redis_cpu_seconds(client: Redis) -> float:
    """User + system CPU time of the Redis server so far."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def wait_until(condition: Callable[[], bool], timeout: float, what: str, poll: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# --- Redis counters ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisCount:
    """Redis work between two points: commands executed (including those inside Lua scripts) and
    read events (one per request or pipeline a client sends: its round trips)."""

    commands: int
    reads: int

    def __sub__(self, other: RedisCount) -> RedisCount:
        return RedisCount(self.commands - other.commands, self.reads - other.reads)

    def __add__(self, other: RedisCount) -> RedisCount:
        return RedisCount(self.commands + other.commands, self.reads + other.reads)


def reset_counters(client: Redis) -> None:
    client.config_resetstat()


def read_counters(client: Redis) -> RedisCount:
    """Totals since the last reset: the sum of ``calls`` over ``INFO commandstats``, and
    ``total_reads_processed`` from ``INFO stats``."""
    stats = client.info("commandstats")
    reads = client.info("stats")["total_reads_processed"]
    return RedisCount(sum(int(v["calls"]) for v in stats.values()), int(reads))


@contextlib.contextmanager
def monitor(port: int, path: Path) -> Iterator[None]:
    """Record every command Redis executes to ``path`` (``redis-cli monitor``), for the
    split between commands clients send and commands Lua scripts run."""
    with path.open("wb") as out:
        process = subprocess.Popen(
            ["redis-cli", "-p", str(port), "monitor"], stdout=out, stdin=subprocess.DEVNULL
        )
    try:
        wait_until(lambda: path.stat().st_size > 0, 5, "redis-cli monitor")  # it prints OK once attached
        yield
        time.sleep(0.2)  # let the last lines arrive
    finally:
        process.terminate()
        process.wait()


def count_monitor(path: Path) -> tuple[int, int]:
    """(commands sent by clients, commands run inside Lua scripts) in a ``redis-cli monitor`` log."""
    sent = scripted = 0
    with path.open("rb") as lines:
        for line in lines:
            if b" [" not in line:
                continue  # the OK line
            if b" lua] " in line:
                scripted += 1
            else:
                sent += 1
    return sent, scripted
