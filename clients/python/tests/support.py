"""Test support: a real redis-server (REDIS_URL, else one started here
from PATH), key prefixes of each test's own, and servers a test may stop
and restart. Never a mock."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[3]
CASES = REPO / "lua" / "testdata" / "conformance.json"
PROTOCOL_DOC = REPO / "docs" / "protocol.md"


class Server:
    """A redis-server on a free 127.0.0.1 port, in a directory of its own,
    without persistence: stop() and start() again on the same port (a
    restart leaves it empty)."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            raise unittest.SkipTest("redis-server is not on PATH")
        self.dir = tempfile.mkdtemp(prefix="pacer-py-redis-")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(os.path.join(self.dir, "log"), "ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self.dir],
                stdout=log, stderr=subprocess.STDOUT)
        c = redis.Redis(port=self.port, socket_timeout=1)
        for _ in range(200):
            try:
                c.ping()
                return
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def freeze(self) -> None:
        """SIGSTOP: connections hang (a client times out), data stays."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_shared: Server | None = None


def redis_url() -> str:
    """REDIS_URL (Go's redistest passes it), else a server started here."""
    global _shared
    url = os.environ.get("REDIS_URL")
    if url:
        return url
    if _shared is None:
        _shared = Server()
        atexit.register(_shared.close)
    return _shared.url


class Proxy:
    """A TCP proxy on a free 127.0.0.1 port in front of a server, whose
    replies can be made late (``latency``, seconds: a slow Redis or
    network, the commands running on time), as Go's redistest.Proxy.
    ``sent(needle)`` counts the commands sent through it that contain
    needle."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.latency = 0.0
        self._lsn = socket.socket()
        self._lsn.bind(("127.0.0.1", 0))
        self._lsn.listen(16)
        self.port = self._lsn.getsockname()[1]
        self._lock = threading.Lock()
        self._sent: list[bytes] = []
        self._socks: list[socket.socket] = []
        self._closed = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def sent(self, needle: bytes) -> int:
        with self._lock:
            return sum(1 for b in self._sent if needle in b)

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._lsn.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream))
            with self._lock:
                if self._closed:
                    down.close()
                    up.close()
                    return
                self._socks += [down, up]
            for src, dst, late in ((down, up, False), (up, down, True)):
                th = threading.Thread(target=self._pump, args=(src, dst, late), daemon=True)
                th.start()
                self._threads.append(th)

    def _pump(self, src: socket.socket, dst: socket.socket, late: bool) -> None:
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if late:
                    time.sleep(self.latency)
                else:
                    with self._lock:
                        self._sent.append(b)
                dst.sendall(b)
        except OSError:
            pass
        finally:
            for sk in (src, dst):
                try:
                    sk.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks = list(self._socks)
        try:
            self._lsn.shutdown(socket.SHUT_RDWR)  # wakes accept (Linux)
        except OSError:
            pass
        self._lsn.close()
        for sk in socks:
            try:
                sk.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sk.close()
        for th in self._threads:
            th.join(timeout=5)


def client(url: str | None = None, **kw: object) -> redis.Redis:
    kw.setdefault("socket_timeout", 1.0)
    kw.setdefault("socket_connect_timeout", 1.0)
    return redis.Redis.from_url(url or redis_url(), **kw)  # type: ignore[arg-type]


def prefix() -> str:
    """A key prefix of the test's own (the server may be shared)."""
    return f"pacerpy:{uuid.uuid4().hex[:8]}:"
