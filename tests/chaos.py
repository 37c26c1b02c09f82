"""Things tests break on purpose: a private Redis server, and a TCP proxy (to Redis or PostgreSQL)
that can be cut or partitioned."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from django.db import transaction


def free_port(highest: int = 65535) -> int:
    """A loopback port free right now, at most ``highest``."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port <= highest:
            return port


_held: list[socket.socket] = []


def closed_port() -> int:
    """A loopback port nothing can listen on while the tests run: bound by this process, never
    listened on, so a connection to it is refused (a fixed "unused" port may be taken by a demo or
    a private Redis of a parallel run; a merely free port may be taken later)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _held.append(sock)
    return int(sock.getsockname()[1])


#: A queue whose Redis refuses every connection.
DOWN = {"URL": f"redis://127.0.0.1:{closed_port()}/0", "SERIALIZER": "rq.serializers.JSONSerializer"}


def wait_port(port: int, up: bool = True, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if (sock.connect_ex(("127.0.0.1", port)) == 0) == up:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} did not go {'up' if up else 'down'}")


class RedisServer:
    """A redis-server of our own on a spare loopback port. Its append-only file survives a stop."""

    def __init__(self, directory: Path, *options: str) -> None:
        # In cluster mode the server also listens on its port + 10000 (the cluster bus).
        self.port = free_port(highest=55535) if "--cluster-enabled" in options else free_port()
        self.directory = directory
        self.options = options  # more redis-server options, e.g. "--cluster-enabled", "yes"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.directory), *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_port(self.port)

    def stop(self) -> None:
        """A clean shutdown: everything acknowledged is on disk for the next start."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
            self.proc = None
        wait_port(self.port, up=False)

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        if self.proc is not None:
            self.thaw()
            self.proc.kill()
            self.proc.wait()
            self.proc = None


class CuttableProxy:
    """Forwards a loopback port to a target.

    ``cut()`` drops every connection and refuses new ones, as a target that went away does: the peers
    learn of it at once. ``partition()`` lets nothing through either way while every connection stays
    open and new ones are accepted, as a network that silently drops packets does: each side learns of
    it only by its own timeouts. ``heal()`` then delivers what was held back, as TCP's retransmissions
    would (so a request its sender gave up on may still land), and lets traffic flow again.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self._flowing.wait()  # a connection opened across a partition reaches the target after it
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self._flowing.wait()
                sink.sendall(data)
        self._flowing.wait()  # a close crosses the network like data
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(
                    socket.SHUT_RDWR
                )  # wakes the blocked accept(); close() alone does not
            self._listener.close()
            self._listener = None
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()
        self._flowing.set()  # a partition ends with the proxy: nothing waits on it any more

    def restore(self) -> None:
        self.start()

    def partition(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()


def converged(client: redis.Redis) -> dict[str, int]:
    """What is left in a Redis once every job ended: all of it should be 0."""
    leases = {m.decode() for m in client.zrange("djjobs:leases", 0, -1)}
    slots = [m.decode() for key in client.keys("djjobs:slots:*") for m in client.zrange(key, 0, -1)]
    return {
        "leases": len(leases),
        "live slots": sum(1 for token in slots if token in leases),
        "lost": client.zcard("djjobs:lost"),
        "dying": client.zcard("djjobs:dying"),
        "queued": sum(client.llen(k) for k in client.keys("rq:queue:*")),
        "scheduled": sum(client.zcard(k) for k in client.keys("rq:scheduled:*")),
    }


def enqueue_alternating(i: int, enqueue: Callable[..., Any], *args: Any) -> Any:
    """The ``i``-th job of a load: odd ones in a transaction, even ones outside, the two ways a job is
    committed (an outbox row before COMMIT, or a row beside the push)."""
    if i % 2:
        with transaction.atomic():
            return enqueue(*args)
    return enqueue(*args)
