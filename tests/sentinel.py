"""A real Redis Sentinel set-up for failover tests: a primary, a replica that lags on purpose, three
sentinels, all on loopback ports 7100-7199 in a temporary directory, each stopped at the end.

The replica replicates through :class:`LaggingLink`, a proxy that holds the primary's stream for
``lag`` seconds, so when the primary is killed (and the link with it) the replica has missed exactly
the writes of the last ``lag`` seconds, as a replica on a slow network would.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import redis

from tests.chaos import wait_port

MASTER_NAME = "jobs"
#: Loopback ports these tests may use; the SQLite and PostgreSQL legs take one half each.
PORTS = range(7100, 7150) if os.environ.get("JOBS_TEST_DB", "sqlite") == "sqlite" else range(7150, 7200)


def port_in_range(taken: set[int]) -> int:
    candidates = [p for p in PORTS if p not in taken]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError(f"no free port in {PORTS}")


class LaggingLink:
    """Forwards ``port`` to ``target``, delivering the target's bytes ``lag`` seconds late."""

    def __init__(self, port: int, target: int, lag: float) -> None:
        self.port, self.target, self.lag = port, target, lag
        self.listener = socket.create_server(("127.0.0.1", port), reuse_port=True)
        self.sockets: list[socket.socket] = []
        self.alive = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.alive:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                return
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.lag), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, lag: float) -> None:
        held: collections.deque[tuple[float, bytes]] = collections.deque()
        ready = threading.Condition()

        def deliver() -> None:
            while self.alive:
                with ready:
                    while not held and self.alive:
                        ready.wait(0.1)
                    if not held:
                        return
                    due, data = held[0]
                if time.monotonic() < due:
                    time.sleep(min(due - time.monotonic(), 0.05))
                    continue
                with ready:
                    held.popleft()
                with contextlib.suppress(OSError):
                    sink.sendall(data)

        threading.Thread(target=deliver, daemon=True).start()
        with contextlib.suppress(OSError):
            while self.alive and (data := source.recv(65536)):
                with ready:
                    held.append((time.monotonic() + lag, data))
                    ready.notify()

    def cut(self) -> None:
        """Drop the link and everything it still holds."""
        self.alive = False
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Switch:
    """When (``time.time()``) the first sentinel named the replica as primary: the earliest moment a
    Sentinel client can find the new primary. Polled every 10 ms, for at most ``timeout`` seconds."""

    def __init__(self, sentinel_ports: list[int], replica_port: int, timeout: float) -> None:
        self.at: float | None = None
        clients = [redis.Redis(port=port, socket_timeout=1) for port in sentinel_ports]
        watch = (clients, replica_port, timeout)
        self._thread = threading.Thread(target=self._watch, args=watch, daemon=True)
        self._thread.start()

    def _watch(self, clients: list[redis.Redis], replica_port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.at is None:
            for client in clients:
                with contextlib.suppress(redis.RedisError):
                    if int(client.sentinel_get_master_addr_by_name(MASTER_NAME)[1]) == replica_port:
                        self.at = time.time()
            time.sleep(0.01)
        for client in clients:
            client.close()

    def wait(self) -> float:
        self._thread.join()
        if self.at is None:
            raise AssertionError("no sentinel named the replica as primary")
        return self.at


class SentinelSetup:
    """Primary, lagging replica and three sentinels; :meth:`kill_primary` starts a failover."""

    def __init__(self, directory: Path, lag: float = 1.0) -> None:
        self.directory, self.lag = directory, lag
        self.taken: set[int] = set()
        self.primary_port, self.replica_port = port_in_range(self.taken), port_in_range(self.taken)
        self.sentinel_ports = [port_in_range(self.taken) for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._server(self.primary_port)
        self._replica()
        for port in self.sentinel_ports:
            self._sentinel(port)
        self._wait(self._replica_known)

    def _replica(self) -> None:
        """Start the replica, replicating through a fresh lagging link."""
        self.link = LaggingLink(port_in_range(self.taken), self.primary_port, self.lag)
        self._server(self.replica_port, "--replicaof", "127.0.0.1", str(self.link.port))
        self._wait(lambda: self.client(self.replica_port).info("replication")["master_link_status"] == "up")

    def rejoin(self, lag: float | None = None) -> None:
        """Bring the killed primary back as the new primary's replica (lagging ``lag`` seconds, by
        default as much as the first), ready for the next failover."""
        self.lag = self.lag if lag is None else lag
        self.primary_port, self.replica_port = self.replica_port, self.primary_port
        self._replica()
        self._wait(self._replica_known)

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=5)

    def _server(self, port: int, *extra: str) -> None:
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--repl-diskless-sync", "no", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(port)

    def _sentinel(self, port: int) -> None:
        conf = self.directory / f"sentinel-{port}.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
        )
        self.procs[port] = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(port)

    def _replica_known(self) -> bool:
        for port in self.sentinel_ports:
            replicas = self.client(port).sentinel_slaves(MASTER_NAME)
            if not any(r["port"] == self.replica_port and "s_down" not in r["flags"] for r in replicas):
                return False
        return True

    @staticmethod
    def _wait(predicate, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"Sentinel set-up: {predicate} not true within {timeout} s")
            time.sleep(0.1)

    def master_port(self) -> int:
        return int(self.client(self.sentinel_ports[0]).sentinel_get_master_addr_by_name(MASTER_NAME)[1])

    def kill_primary(self) -> float:
        """SIGKILL the primary and drop what its replica had not received; returns when (monotonic)."""
        killed = time.monotonic()
        self.procs[self.primary_port].send_signal(signal.SIGKILL)
        self.link.cut()
        return killed

    def wait_for_failover(self, timeout: float = 30) -> float:
        """Until every sentinel names the replica as primary and it accepts writes; returns when."""
        self._wait(lambda: all(self._names_replica(p) for p in self.sentinel_ports), timeout)
        self._wait(lambda: self.client(self.replica_port).info("replication")["role"] == "master", timeout)
        return time.monotonic()

    def watch_switch(self, timeout: float = 30) -> Switch:
        """Start watching, from a thread, for the first sentinel to name the replica as primary."""
        return Switch(self.sentinel_ports, self.replica_port, timeout)

    def _names_replica(self, port: int) -> bool:
        with contextlib.suppress(redis.RedisError):
            address = self.client(port).sentinel_get_master_addr_by_name(MASTER_NAME)
            return int(address[1]) == self.replica_port
        return False

    def close(self) -> None:
        self.link.cut()
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
