"""Links: single TCP connections between a process that listens (a parameter server) and the
processes that connect to it (workers), each living and dying on its own.

socket.py's full mesh fails the whole world at any loss; a parameter server's workers come and go,
so here each connection is a ``Link`` that ends alone, and its owner hears of it exactly once
(``on_end``): after the other side's goodbye, or with why it did not get one (the peer's process
was killed, the connection broke, or the peer was silent, not even heartbeats, for ``silence``
seconds: frozen or cut off). A message is a list of parts, delivered whole or not at all, in order.

The pieces are socket.py's: its frame header and kinds, its per-peer sending stream (small messages
written by the caller, large ones from a thread, from the caller's memory), its heartbeat rule.
Threads: a receive thread per link, a sending thread per link once it sends something large or
closes, an accept thread per Listener, and one watcher per process (heartbeats out, silence found).
"""
from __future__ import annotations

import atexit
import select
import socket
import struct
import sys
import threading
import time

import numpy as np

from .. import faults
from .base import DistError
from .socket import _BEAT, _BYE, _DATA, _HEADER, _Sender, _heartbeat, _recv_exact, address

_SHAKE = struct.Struct("<8sqqQ")   # magic, sender's id, refused (0/1), count; then count int64 words (or message bytes)
_MAGIC = b"minidlLk"
_COUNT = struct.Struct("<Q")       # a message's part count, then as many part lengths, then the parts
_MAX_WORDS = 1 << 16               # a hello with more words is a stranger's


class LinkLost(DistError):
    """A send on a link that has ended (the peer died, froze, was cut off, or a goodbye was said)."""


def _part(part) -> memoryview:
    """A message part as bytes, without a copy (it is read later, when it is written)."""
    if isinstance(part, np.ndarray):
        if not part.flags.c_contiguous:
            raise ValueError("links: a message part must be contiguous (a numpy array that is not)")
        return part.reshape(-1).view(np.uint8).data
    try:
        return memoryview(part).cast("B")
    except TypeError:
        raise ValueError(f"links: a message part must be bytes-like and contiguous, "
                         f"got {type(part).__name__}") from None


class _Owner:
    """What socket.py's ``_Sender`` asks of its owner, for one link (``Link.lost`` is taken: the link's state)."""

    # faults.fire's world size: a partition fault without peer= cuts the link to id me + 1, "the next rank"
    size = sys.maxsize

    def __init__(self, link):
        self.link = link

    @property
    def rank(self):
        return self.link.me

    @property
    def heartbeat(self):
        return self.link.silence

    @property
    def failed(self):
        return self.link._why

    def lost(self, peer, how):
        self.link._fail(f"peer {peer}: {how}")


class Link:
    """One connection between ``me`` and ``peer``. ``words``: the ints the other side gave in the
    handshake. ``lost``: why it ended without a goodbye (None while open, or after a goodbye)."""

    def __init__(self, sock, me, peer, words, on_message, on_end, silence):
        self.sock, self.me, self.peer, self.words = sock, int(me), int(peer), list(words)
        self.on_message, self.on_end, self.silence = on_message, on_end, float(silence)
        # heartbeats go out at least as often as the default silence asks, whatever this side's patience:
        # the other side may have less
        self.beat = min(self.silence, _heartbeat()) / 5
        self.lost = None
        self.seen = time.monotonic()   # when the peer's last byte came
        self._lock = threading.Lock()
        self._closing = False   # close() was called: queued messages still go, then the goodbye
        self._why = None        # why it is ending, once broken (cut, silent, a write that failed)
        self._ended = False     # on_end was called
        self._delivering = False   # on_message runs
        self._sender = _Sender(_Owner(self), self.peer, sock)
        self._writable = select.poll()   # (the watcher's own: the sending thread polls the sender's)
        self._writable.register(sock, select.POLLOUT)

    @property
    def over(self) -> bool:
        """Whether the link has ended or is ending (a goodbye said or heard, a cut, a loss): sends fail."""
        return self._closing or self._why is not None or self._ended

    def __repr__(self):
        return f"Link({self.me} to {self.peer}{', lost: ' + self.lost if self.lost else ''})"

    def send(self, parts) -> None:
        """Queue ONE message made of ``parts`` (bytes-like or contiguous numpy arrays), delivered whole
        or not at all, after the earlier ones. Large parts are written later from the caller's memory:
        hand over memory that does not change (bytes, or a copy)."""
        pieces = [_part(p) for p in parts]
        if self.over:
            raise LinkLost(f"links: the link from {self.me} to peer {self.peer} is over: "
                           f"{self._why or self.lost or 'it was closed'}")
        table = _COUNT.pack(len(pieces)) + struct.pack(f"<{len(pieces)}Q", *map(len, pieces))
        self._sender.send(_DATA, 0, 0, [table, *pieces])

    def close(self) -> None:
        """Say goodbye after everything queued was written: the other side's on_end gets why=None
        (this side's too, once the other side has closed its end)."""
        with self._lock:
            if self._closing or self._why is not None or self._ended:
                return
            self._closing = True
        self._sender.send(_BYE, 0, 0, b"", last=True)

    def cut(self) -> None:
        """Fault injection: shut the connection both ways without a goodbye (both sides' on_end get a reason)."""
        self._fail(f"the link from {self.me} to peer {self.peer} was cut by {self.me} (fault injection)")

    # -- the link's life ------------------------------------------------------------------------
    def _start(self):
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.seen = time.monotonic()
        threading.Thread(target=self._receive, daemon=True, name=f"minidl link {self.me} from {self.peer}").start()
        _watcher.add(self)

    def _fail(self, why):
        """Break the link: the receive thread wakes to the shut socket and reports ``why``."""
        with self._lock:
            if self._why is not None or self._ended:
                return
            self._why = why
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _alive(self):
        self.seen = time.monotonic()

    def _receive(self):
        head = memoryview(bytearray(_HEADER.size))
        why = None
        try:
            while True:
                if not _recv_exact(self.sock, head, self._alive):
                    why = f"peer {self.peer} closed the link without a goodbye (its process died?)"
                    break
                kind, _, _, n = _HEADER.unpack(head)
                if kind == _BYE:
                    break
                if kind == _DATA:
                    parts = self._read(n)
                    self._delivering = True
                    self.on_message(self, parts)
                    self._delivering = False
                elif kind != _BEAT or n:
                    raise ConnectionError(f"a frame of kind {kind} and {n} bytes, not of a link")
        except ConnectionResetError as e:   # (a killed peer with our bytes unread resets instead)
            why = f"peer {self.peer} closed the link without a goodbye (its process died? {e})"
        except OSError as e:
            why = f"the link to peer {self.peer} broke ({e})"
        except Exception as e:   # noqa: BLE001 (on_message's: the link ends, and on_end says why)
            why = f"on_message failed on a message from peer {self.peer}: {type(e).__name__}: {e}"
        self._end(why)

    def _read(self, n):
        """One message's parts, as memoryviews of the one buffer it is read into."""
        buf = memoryview(np.empty(n, np.uint8))
        _recv_exact(self.sock, buf, self._alive)
        count = _COUNT.unpack_from(buf)[0] if n >= _COUNT.size else n  # (n < 8: start > n below)
        start = _COUNT.size * (count + 1)
        if start > n:
            raise ConnectionError(f"a message of {n} bytes with a table of {count} parts")
        parts = []
        for length in struct.unpack_from(f"<{count}Q", buf, _COUNT.size):
            parts.append(buf[start:start + length])
            start += length
        if start != n:
            raise ConnectionError(f"a message of {n} bytes whose parts add up to {start}")
        return parts

    def _end(self, why):
        """The one on_end: a goodbye (either side's) is None, else the first cause found."""
        with self._lock:
            why = None if why is None or self._closing else (self._why or why)
            self._ended = True
        self.sock.close()
        self._sender.stop()
        _watcher.remove(self)
        self.lost = why
        self.on_end(self, why)

    def _tick(self, now):
        """The watcher's visit: a heartbeat out (when the socket has room: never wait on a frozen peer),
        and the end of a peer silent for too long."""
        if self._why is not None or self._ended:
            return
        if not self._closing and self._writable.poll(0):   # (after a goodbye, nothing more may follow)
            self._sender.beat()
        if self._delivering:   # (the peer's bytes wait unread while on_message runs: not its silence)
            self.seen = now
        if now - self.seen > self.silence:
            self._fail(f"peer {self.peer} sent nothing, not even a heartbeat, for {now - self.seen:.1f} s "
                       f"(frozen or cut off; silence={self.silence:g} s)")


class _Watcher:
    """The process's one thread that sends every link's heartbeats (every ``beat``) and ends silent
    links; it starts with the first link and ends with the last."""

    def __init__(self):
        self.lock = threading.Lock()
        self.links = set()
        self.thread = None
        self.added = threading.Event()   # (a new link may need a shorter interval than the one slept)

    def add(self, link):
        with self.lock:
            self.links.add(link)
            self.added.set()
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True, name="minidl links watcher")
                self.thread.start()

    def remove(self, link):
        with self.lock:
            self.links.discard(link)

    def open_links(self):
        with self.lock:
            return list(self.links)

    def _run(self):
        last = time.monotonic()
        while True:
            with self.lock:
                if not self.links:
                    self.thread = None
                    return
                interval = min(link.beat for link in self.links)
            if self.added.wait(interval):
                self.added.clear()
            now = time.monotonic()
            frozen = now - last > 2 * interval   # this process was frozen itself: its peers' bytes wait unread
            last = now
            for link in self.open_links():
                if frozen:
                    link.seen = now
                link._tick(now)

    def partition(self, rank, peer):
        """Fault injection (MINIDL_FAULT's do=partition): cut the link from ``rank`` to ``peer``."""
        for link in self.open_links():
            if link.me == rank and link.peer == peer:
                link.cut()


_watcher = _Watcher()
faults.on_partition(_watcher.partition)


class Listener:
    """Accepts links at ``address`` ("host:port"; port 0 picks a free one). ``on_hello(link)`` (on the
    accept thread, link.peer and link.words set) returns the welcome words, or raises to refuse the
    connector with its message; ``on_message(link, parts)`` and ``on_end(link, why)`` run on each
    link's receive thread. A link is for sending once its welcome went: ``on_ready(link)`` says so."""

    def __init__(self, me, on_hello, on_message, on_end, *, host=None, port=0, silence=None, on_ready=None):
        self.me, self.on_hello, self.on_message, self.on_end = int(me), on_hello, on_message, on_end
        self.on_ready = on_ready
        self.silence = _heartbeat() if silence is None else float(silence)
        host = address() if host is None else host
        self._sock = socket.create_server((host, port), backlog=64)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True, name=f"minidl links {self.me} accept").start()

    def close(self) -> None:
        """Stop accepting (the links already made stay)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)   # (wakes the accept thread, which close alone would not)
        except OSError:
            pass
        self._sock.close()

    def _accept(self):
        while True:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            try:
                self._welcome(sock)
            except OSError:   # (a stranger, or a connector gone during its hello)
                sock.close()

    def _welcome(self, sock):
        sock.settimeout(min(self.silence, _heartbeat()))   # (a hello that never comes holds the accept
        # thread, and every connector behind it, no longer)
        head = bytearray(_SHAKE.size)
        if not _recv_exact(sock, memoryview(head)):
            raise ConnectionError("closed before its hello")
        magic, peer, _, count = _SHAKE.unpack(head)
        if magic != _MAGIC or count > _MAX_WORDS:
            raise ConnectionError("not a link's hello")
        body = bytearray(8 * count)
        _recv_exact(sock, memoryview(body))
        link = Link(sock, self.me, peer, struct.unpack(f"<{count}q", body), self.on_message, self.on_end, self.silence)
        try:
            words = [int(w) for w in self.on_hello(link)]
        except Exception as e:   # noqa: BLE001 (the refusal goes back to the connector)
            text = (str(e) or type(e).__name__).encode()
            sock.sendall(_SHAKE.pack(_MAGIC, self.me, 1, len(text)) + text)
            sock.close()
            return
        try:
            sock.sendall(_SHAKE.pack(_MAGIC, self.me, 0, len(words)) + struct.pack(f"<{len(words)}q", *words))
        except OSError:
            pass   # (accepted: its receive thread finds the broken connection and on_end reports it)
        if self.on_ready is not None:
            self.on_ready(link)
        link._start()


def connect(address, me, words, on_message, on_end, *, silence=None, timeout=30.0) -> Link:
    """A link from ``me`` to the Listener at ``address``, which is given ``words``; the link's own
    ``words`` are the listener's welcome. Raises DistError naming the address when nothing listens
    there, nothing answers within ``timeout`` s, or the listener refuses (with its reason)."""
    silence = _heartbeat() if silence is None else float(silence)
    words = [int(w) for w in words]
    host, _, port = address.rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as e:
        raise DistError(f"links: could not connect to {address} ({e})") from None
    try:
        sock.sendall(_SHAKE.pack(_MAGIC, me, 0, len(words)) + struct.pack(f"<{len(words)}q", *words))
        head = bytearray(_SHAKE.size)
        if not _recv_exact(sock, memoryview(head)):
            raise DistError(f"links: {address} closed the connection during the handshake (not a links Listener?)")
        magic, peer, refused, count = _SHAKE.unpack(head)
        if magic != _MAGIC or count > _MAX_WORDS:
            raise DistError(f"links: {address} is not a links Listener")
        body = bytearray(count if refused else 8 * count)
        _recv_exact(sock, memoryview(body))
        if refused:
            raise DistError(f"links: {address} refused {me}: {body.decode(errors='replace')}")
    except BaseException as e:
        sock.close()
        if isinstance(e, TimeoutError):
            raise DistError(f"links: no answer from {address} within {timeout} s") from None
        if isinstance(e, OSError):
            raise DistError(f"links: the handshake with {address} failed ({e})") from None
        raise
    link = Link(sock, me, peer, struct.unpack(f"<{count}q", body), on_message, on_end, silence)
    link._start()
    return link


@atexit.register
def _goodbye():
    """A process that ends with links open says goodbye on them (its peers see a departure, not a death)."""
    links = _watcher.open_links()
    for link in links:
        link.close()
    for link in links:
        if link._sender.thread is not None:
            link._sender.thread.join(timeout=5)
