"""TCPStore's server: a thread that accepts clients and one thread per client that runs its requests
on a HashStore (so a waiting ``get`` blocks only its own client). It lives in the master's process
and answers until that TCPStore is collected or the process ends; processes that hold a master for
the whole job (a launcher) give a store that outlives the workers.

Masters of one process that ask for the same port with ``multi_tenant=True`` share one server.
"""
from __future__ import annotations

import errno
import socket
import threading

from . import wire
from .base import DistNetworkError, DistStoreError
from .hash import HashStore

_tenants_lock = threading.RLock()   # (re-entered when garbage collection, run while a server is made under
# it, finalizes a forgotten TCPStore, whose release takes it again on the same thread)
_tenants: dict = {}  # port -> [server, users]


class StoreServer:
    def __init__(self, host: str, port: int, listen_fd=None):
        if listen_fd is not None:
            self._sock = socket.socket(fileno=listen_fd)
            self._sock.listen()
        else:
            self._sock = _listen(host, port)
        self.port = self._sock.getsockname()[1]
        self._table = HashStore()
        self._joined = 0
        self._joined_changed = threading.Condition()
        self._clients: set = set()
        self._closed = False
        threading.Thread(target=self._accept, name=f"TCPStore:{self.port}", daemon=True).start()

    def wait_joined(self, count: int, seconds: float) -> int:
        """Wait until ``count`` clients said hello; how many did."""
        with self._joined_changed:
            self._joined_changed.wait_for(lambda: self._joined >= count, seconds)
            return self._joined

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for conn in list(self._clients):
            _shut(conn)

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._clients.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            while not self._closed:
                request = wire.recv_frame(conn)
                if request is None:
                    return
                wire.send_frame(conn, self._answer(request))
        except (OSError, ValueError):
            return  # the client went away or spoke garbage: drop it, keep serving the others
        finally:
            self._clients.discard(conn)
            _shut(conn)

    def _answer(self, request):
        op, args = request[0], request[1:]
        try:
            if op == "hello":
                with self._joined_changed:
                    self._joined += 1
                    self._joined_changed.notify_all()
                return ["ok", None]
            if op == "wait_get":
                return ["ok", self._table._wait_get(*args)]
            return ["ok", self._table._run(op, *args)]
        except (ValueError, TypeError) as e:
            return ["error", type(e).__name__, str(e)]
        except (DistStoreError, KeyError, IndexError) as e:
            return ["error", "DistStoreError", str(e) if isinstance(e, DistStoreError) else f"bad request {op!r}"]


def _listen(host, port):
    family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
    try:
        return socket.create_server(("", port), family=family, backlog=1024,
                                    dualstack_ipv6=family == socket.AF_INET6)
    except OSError as e:
        why = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror
        raise DistNetworkError(f"TCPStore can't listen on {host}:{port}: {why}") from None


def _shut(conn):
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def acquire(host, port, multi_tenant, listen_fd) -> StoreServer:
    """A server on ``port``: a new one, or this process's existing one when both are multi-tenant."""
    with _tenants_lock:
        if multi_tenant and port in _tenants:
            _tenants[port][1] += 1
            return _tenants[port][0]
        server = StoreServer(host, port, listen_fd)
        if multi_tenant:
            _tenants[server.port] = [server, 1]
        return server


def release(server: StoreServer) -> None:
    with _tenants_lock:
        entry = _tenants.get(server.port)
        if entry is not None and entry[0] is server:
            entry[1] -= 1
            if entry[1]:
                return
            del _tenants[server.port]
    server.close()
