"""Rendezvous: how ranks find a shared store before any communicator exists (torch's
``rendezvous(url)`` with ``env://``, ``tcp://`` and ``file://``), and ``join``, the round every rank
goes through on that store.

``join`` keeps rounds apart with key prefixes. Each rank's k-th join (counted per rank with ``add``)
is round k, whose keys live under ``<what>/round<k>/``; so the same store serves later rounds (a
restarted job, a new parameter-server generation) without old keys meeting new ones, as long as every
rank of the job joins each round.
"""
from __future__ import annotations

import numbers
import os
import time
from datetime import timedelta
from urllib.parse import urlparse, urlunparse

from .store import DistStoreError, FileStore, PrefixStore, TCPStore

DEFAULT_TIMEOUT = timedelta(minutes=30)
_handlers: dict = {}


def register_rendezvous_handler(scheme: str, handler) -> None:
    """Add a URL scheme; ``handler(url, **kwargs)`` is a generator yielding (store, rank, world_size)."""
    if scheme in _handlers:
        raise RuntimeError(f"Rendezvous handler for {scheme}:// already registered")
    _handlers[scheme] = handler


def rendezvous(url: str, rank: int = -1, world_size: int = -1, **kwargs):
    """An iterator of (store, rank, world_size) for ``url``; rank and world_size given here go into
    its query (a url that already has them is an error, as in torch)."""
    if not isinstance(url, str):
        raise RuntimeError(f"`url` must be a string. {type(url)}: {url}")
    if not isinstance(rank, numbers.Integral):
        raise RuntimeError(f"`rank` must be an integer. {rank}")
    if not isinstance(world_size, numbers.Integral):
        raise RuntimeError(f"`world_size` must be an integer. {world_size}")
    parts = urlparse(url)
    if rank != -1 or world_size != -1:
        query = _query(parts.query)
        if "rank" in query or "world_size" in query:
            raise AssertionError(f"The url: {url} has node-specific arguments(rank, world_size) already.")
        if rank != -1:
            query["rank"] = str(rank)
        if world_size != -1:
            query["world_size"] = str(world_size)
        url = urlunparse(parts._replace(query="&".join(f"{k}={v}" for k, v in query.items())))
    if parts.scheme not in _handlers:
        raise RuntimeError(f"No rendezvous handler for {parts.scheme}://")
    return _handlers[parts.scheme](url, **kwargs)


def _query(query: str) -> dict:
    return dict(pair.split("=", 1) for pair in query.split("&") if pair)


def _error(scheme, msg):
    return ValueError(f"Error initializing minidl.dist using {scheme}:// rendezvous: {msg}")


def _rank_and_size(scheme, query):
    if "rank" not in query:
        raise _error(scheme, "rank parameter missing")
    if "world_size" not in query:
        raise _error(scheme, "world size parameter missing")
    return int(query["rank"]), int(query["world_size"])


_masters = {}   # (host, port) -> the first master TCPStore this process served there, kept for the process's life


def _c10d_store(host, port, rank, world_size, timeout):
    """Rank 0 hosts the TCPStore (multi-tenant: one server per port in a process); the others connect. The
    master does not wait for the workers to connect: ``join`` waits for them, naming the ranks missing."""
    if not 0 <= port < 2**16:
        raise ValueError(f"port must have value from 0 to 65535 but was {port}.")
    store = TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout, multi_tenant=True,
                     wait_for_workers=False)
    if rank == 0:   # (its server outlives the group: a later init on the port finds the rounds it counted)
        _masters.setdefault((host, port), store)
    return store


def agent_prefix(run_id: str, restart_count) -> str:
    """The key space of one attempt of a launched job: a restarted group never meets keys (rounds, socket
    addresses, abort notes) its dead predecessor left on the launcher's store."""
    return f"torchelastic/{run_id}/attempt{restart_count}"


def _agent_store(host, port, world_size, timeout):
    """A client of the launcher's store, seen through this attempt's prefix: the launchers' rendezvous round
    (MINIDL_RUN_ATTEMPT, the same on every node) when there are several nodes, else the restart count."""
    if not 0 <= port < 2**16:
        raise ValueError(f"port must have value from 0 to 65535 but was {port}.")
    client = TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    attempt = os.environ.get("MINIDL_RUN_ATTEMPT") or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    prefix = agent_prefix(os.environ.get("TORCHELASTIC_RUN_ID", "none"), attempt)
    return PrefixStore(prefix, client)


def _file_handler(url, **kwargs):
    parts = urlparse(url)
    if not parts.path:
        raise _error("file", "path missing")
    rank, world_size = _rank_and_size("file", _query(parts.query))
    yield FileStore(parts.path, world_size), rank, world_size
    raise RuntimeError("Unable to perform rerendezvous using file:// method")


def _tcp_handler(url, timeout: timedelta = DEFAULT_TIMEOUT, **kwargs):
    parts = urlparse(url)
    if parts.port is None:
        raise _error("tcp", "port number missing")
    rank, world_size = _rank_and_size("tcp", _query(parts.query))
    if not parts.hostname:
        raise _error("tcp", "host name missing")
    yield _c10d_store(parts.hostname, parts.port, rank, world_size, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using tcp:// method")


def _env(name):
    value = os.environ.get(name)
    if not value:
        raise _error("env", f"environment variable {name} expected, but not set")
    return value


def _env_handler(url, timeout: timedelta = DEFAULT_TIMEOUT, **kwargs):
    """MASTER_ADDR, MASTER_PORT, and RANK and WORLD_SIZE unless the url's query gives them. Under a launcher
    that serves the store itself (``TORCHELASTIC_USE_AGENT_STORE=True``, as ``minidl.dist.run`` and torchrun
    set) every rank is a client, and each attempt of the job gets a key space of its own."""
    query = _query(urlparse(url).query)
    rank = int(query["rank"]) if "rank" in query else int(_env("RANK"))
    world_size = int(query["world_size"]) if "world_size" in query else int(_env("WORLD_SIZE"))
    host, port = _env("MASTER_ADDR"), int(_env("MASTER_PORT"))
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        yield _agent_store(host, port, world_size, timeout), rank, world_size
    else:
        yield _c10d_store(host, port, rank, world_size, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


register_rendezvous_handler("env", _env_handler)
register_rendezvous_handler("tcp", _tcp_handler)
register_rendezvous_handler("file", _file_handler)


def join(store, rank: int, world_size: int, timeout=DEFAULT_TIMEOUT, what: str = "rendezvous") -> int:
    """Register ``rank`` in the next round of ``what`` on ``store`` and wait for all ``world_size``
    ranks; the round number. Raises ValueError for a rank out of range, and DistStoreError (on every
    rank that sees it) for a world size another rank disagrees with, or naming the ranks that never
    arrived within ``timeout`` (a timedelta or seconds)."""
    for name, v in (("rank", rank), ("world_size", world_size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    if world_size < 1:
        raise ValueError(f"{what}: world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"{what}: rank {rank} is out of range for world_size {world_size} "
                         f"(ranks are 0 to {world_size - 1})")
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    round_ = store.add(f"{what}/joins/rank{rank}", 1) - 1
    base = f"{what}/round{round_}/"
    size = store.compare_set(base + "world_size", "", str(world_size)).decode()
    if size != str(world_size):
        message = (f"{what} round {round_}: world sizes disagree: rank {rank} was given world_size="
                   f"{world_size} but an earlier rank registered world_size={size}")
        store.set(base + "abort", message)
        raise DistStoreError(message)
    store.set(f"{base}rank{rank}", str(world_size))
    _wait_all(store, base, world_size, seconds, what, round_)
    return round_


def _wait_all(store, base, world_size, seconds, what, round_):
    """Wait for every rank's key, polling for an abort so a disagreement ends every rank's wait."""
    deadline, pause = time.monotonic() + seconds, 0.002
    keys = [f"{base}rank{r}" for r in range(world_size)]
    while True:
        if store.check([base + "abort"]):
            raise DistStoreError(store.get(base + "abort").decode())
        if store.check(keys):
            return
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [r for r, k in enumerate(keys) if not store.check([k])]
            raise DistStoreError(f"{what} round {round_}: timed out after {seconds:g} s waiting for "
                                 f"rank(s) {missing} of world_size={world_size}; they never arrived")
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
