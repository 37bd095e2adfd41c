"""TCPStore: the store of a multi-process job. The master (``is_master=True``) starts the server in
its own process (``tcp_server.py``); every TCPStore, the master's included, is a client over one TCP
connection whose requests are answered in order. A client never hangs on a dead server: a closed
connection is a DistStoreError naming the server at once, and a server that stops answering is one
after the operation's timeout plus a grace period.
"""
from __future__ import annotations

import socket
import threading
import time
import weakref
from datetime import timedelta

from . import tcp_server, wire
from .base import DistNetworkError, DistStoreError, Store, seconds_of

GRACE_SECONDS = 10.0  # beyond an operation's own timeout, before a silent server counts as dead
_ERRORS = {"DistStoreError": DistStoreError, "ValueError": ValueError, "TypeError": TypeError}


class TCPStore(Store):
    """A client of the store served at ``host_name:port``; with ``is_master`` this process also runs
    the server (``port=0`` picks a free port: read ``store.port``), and with ``wait_for_workers`` and a
    ``world_size`` the master waits until that many stores (itself included) have connected.
    ``master_listen_fd`` hands the server an already listening socket; ``use_libuv`` is accepted for
    torch's signature (the server here is plain sockets and threads)."""

    def __init__(self, host_name: str, port: int, world_size: int | None = None, is_master: bool = False,
                 timeout: timedelta = timedelta(seconds=300), wait_for_workers: bool = True,
                 multi_tenant: bool = False, master_listen_fd: int | None = None, use_libuv: bool = True):
        super().__init__(timeout)
        if not isinstance(host_name, str) or not host_name:
            raise ValueError(f"TCPStore host_name must be a non-empty str, got {host_name!r}")
        if not isinstance(port, int) or not 0 <= port < 2**16:
            raise ValueError(f"TCPStore port must be an int from 0 to 65535, got {port!r}")
        if world_size is not None and (not isinstance(world_size, int) or world_size < 1):
            raise ValueError(f"TCPStore world_size must be a positive int or None, got {world_size!r}")
        if not is_master and port == 0:
            raise ValueError("a TCPStore client (is_master=False) needs the master's port, got 0")
        self._host, self._port = host_name, port
        self._lock = threading.Lock()
        self._broken = None
        server = None
        if is_master:
            server = tcp_server.acquire(host_name, port, multi_tenant, master_listen_fd)
            self._port = server.port
        try:
            self._sock = _connect(host_name, self._port, seconds_of(timeout))
            self._call(["hello"], seconds_of(timeout))
            if server is not None and wait_for_workers and world_size:
                joined = server.wait_joined(world_size, seconds_of(timeout))
                if joined < world_size:
                    raise DistStoreError(
                        f"TCPStore {self._where}: timed out after {seconds_of(timeout):g} s waiting for "
                        f"workers: {joined} of world_size={world_size} joined (the master counts as one)")
        except BaseException:
            if server is not None:
                tcp_server.release(server)
            raise
        weakref.finalize(self, _close, self._sock, server)

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def _where(self):
        return f"{self._host}:{self._port}"

    def _run(self, op, *args):
        return self._call([op, *args], seconds_of(self.timeout))

    def _wait_get(self, keys, seconds, read):
        return self._call(["wait_get", keys, seconds, read], seconds)

    def _call(self, request, seconds):
        with self._lock:
            if self._broken:
                raise DistStoreError(self._broken)
            try:
                self._sock.settimeout(seconds + GRACE_SECONDS)
                wire.send_frame(self._sock, request)
                reply = wire.recv_frame(self._sock)
                if reply is None:
                    raise ConnectionError("connection closed")
            except socket.timeout:
                self._broken = (f"TCPStore server at {self._where} did not answer {_what(request)} within "
                                f"{seconds + GRACE_SECONDS:g} s; is its process (the master's) stuck?")
                raise DistStoreError(self._broken) from None
            except OSError as e:
                self._broken = (f"TCPStore server at {self._where} is gone ({e.strerror or e}) during "
                                f"{_what(request)}; did the master's process exit?")
                raise DistStoreError(self._broken) from None
        if reply[0] == "ok":
            return reply[1]
        raise _ERRORS.get(reply[1], DistStoreError)(f"TCPStore {self._where}: {reply[2]}")


def _what(request):
    """A request as an error message names it: the operation and its key(s)."""
    op, args = request[0], request[1:]
    if op == "wait_get":
        op = "get" if args[2] else "wait"
    if not args or op == "hello":
        return op
    key = args[0][0] if isinstance(args[0], list) and len(args[0]) == 1 else args[0]
    return f"{op}({key!r})"


def _connect(host, port, seconds):
    """Connect, retrying while the master's server is not up yet, for up to ``seconds``."""
    deadline, pause = time.monotonic() + seconds, 0.01
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.01))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError as e:
            if time.monotonic() + pause > deadline:
                raise DistNetworkError(f"TCPStore client can't reach the server at {host}:{port} within "
                                       f"{seconds:g} s: {e.strerror or e}") from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _close(sock, server):
    sock.close()
    if server is not None:
        tcp_server.release(server)
