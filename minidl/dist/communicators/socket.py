"""The "gloo" backend: minidl's own TCP transport, for processes started by anything (no MPI).

Every pair of ranks holds one TCP connection (a full mesh: meant for tens of ranks, not
thousands), found through a store (torch's Store API). Each connection has a receive thread
that files each framed message (kind, context, tag, length) into the receive posted for it
(reading straight into its buffer), else into a queue of early arrivals; receives match in
posting order and arrivals per sender in arrival order (MPI's non-overtaking order). Large sends
go out from a per-peer thread, from the caller's memory (no copy); small ones at once.

Failures are never silent: a connection that ends without a goodbye (a killed rank), a peer
that sends nothing, not even heartbeats, for ``MINIDL_DIST_HEARTBEAT`` seconds (a frozen one),
an uncaught exception on a rank, or an abort key in the store make every pending and later
operation of every rank raise a DistError naming the rank.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import os
import select
import socket
import struct
import sys
import threading
import time
import weakref

import numpy as np

from .. import faults
from .base import DEFAULT_CHUNK, Communicator, DistError, Request, wait_all

ONE_RANK_PER_PROCESS = True
# A peer silent for this long is declared frozen (env MINIDL_DIST_HEARTBEAT); heartbeats go out at
# a fifth of it. 10 s: a rank's heartbeat thread needs the GIL, which a long kernel holding it
# (numpy releases it; most of minidl's Numba kernels are nogil) or a swapping machine can keep for
# seconds; a frozen rank is still found well before any collective's timeout (30 min by default).
HEARTBEAT_SECONDS = 10.0
INLINE_BYTES = 64 * 1024      # sends up to this size are written by the caller, larger by the peer's thread
_HEADER = struct.Struct("<BqqQ")   # kind, context, tag, payload bytes
_HELLO = struct.Struct("<8sqq")    # magic, generation, rank
_MAGIC = b"minidlSk"
_DATA, _BEAT, _BYE, _ABORT = range(4)
_SPLIT_TAG = -(2**62)   # split's own messages (users' and algorithms' tags are >= 0)
_meshes = weakref.WeakSet()   # this process's live meshes (the excepthook and atexit tell their peers)


def _recv_exact(sock, view, alive=None) -> bool:
    """Fill ``view`` from ``sock``; False on a clean end of stream before any byte. ``alive()`` is
    called as bytes come (a long message counts as a sign of life)."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return False
            raise ConnectionResetError("the connection ended in the middle of a message")
        got += n
        if alive is not None:
            alive()
    return True


class _Recv(Request):
    kind = "recv"

    def __init__(self, mesh, comm, buf, src, tag):
        if not buf.flags.c_contiguous:
            raise ValueError("gloo: a receive buffer must be contiguous")
        self.mesh, self.comm, self.peer, self.tag = mesh, comm, src, tag
        self.view = buf.reshape(-1).view(np.uint8)
        self.error = None
        self.done = False

    def matches(self, src_world, tag):
        return tag == self.tag and (self.peer is None or self.comm.members[self.peer] == src_world)

    def fill(self, src_world, data):
        """Copy an early arrival in (as MPI: it may be shorter than the buffer, never longer)."""
        if len(data) > len(self.view):
            self.truncated(src_world, len(data))
        else:
            self.view[:len(data)] = np.frombuffer(data, np.uint8)
        self.finish(src_world)

    def truncated(self, src_world, nbytes):
        self.error = (f"rank {self.comm.rank}'s receive of {len(self.view)} bytes from rank "
                      f"{self.comm.index[src_world]} got a message of {nbytes} bytes (truncated)")

    def finish(self, src_world):
        self.source = self.comm.index[src_world]
        self.done = True   # (after error and source: test reads done first)

    def test(self):
        if self.done:
            if self.error:
                raise DistError(self.error)
            return True
        self.mesh.check(None if self.peer is None else self.comm.members[self.peer], self.comm, receiving=True)
        return False


class _Send(Request):
    kind = "send"

    def __init__(self, mesh, comm, dst):
        self.mesh, self.comm, self.peer, self.done = mesh, comm, dst, False

    def test(self):
        if self.done:
            return True
        self.mesh.check(self.comm.members[self.peer], self.comm, receiving=False)
        return False


class _Sender:
    """One peer's outgoing stream: small messages are written by the caller when nothing is
    queued, the rest in order by a thread of its own (started at the first large send). A
    message's payload is one buffer or a list of them, written back to back (no copy)."""

    def __init__(self, mesh, peer, sock):
        self.mesh, self.peer, self.sock = mesh, peer, sock
        self.poller = select.poll()
        self.poller.register(sock, select.POLLOUT)
        self.cond = threading.Condition()
        self.queue = collections.deque()
        self.busy = False
        self.stopped = False
        self.thread = None

    def beat(self):
        """A heartbeat, unless a write is under way (its bytes are the sign of life then): never waits."""
        if not self.cond.acquire(blocking=False):
            return
        try:
            if not self.queue and not self.busy:
                self._write(_HEADER.pack(_BEAT, 0, 0, 0), [])
        finally:
            self.cond.release()

    def send(self, kind, context, tag, payload, request=None, last=False):
        pieces = [memoryview(p).cast("B") for p in (payload if isinstance(payload, list) else [payload])]
        nbytes = sum(len(p) for p in pieces)
        head = _HEADER.pack(kind, context, tag, nbytes)
        with self.cond:
            if not self.queue and not self.busy and nbytes <= INLINE_BYTES and not last:
                self._write(head, pieces)
                if request is not None:
                    request.done = True
                return
            self.queue.append((head, pieces, request, last))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, daemon=True,
                                               name=f"minidl gloo rank {self.mesh.rank} to {self.peer}")
                self.thread.start()
            self.cond.notify()

    def stop(self):
        """Let the thread end once its queue is done (its connection is over: no more sends come)."""
        with self.cond:
            self.stopped = True
            self.cond.notify()

    def _write(self, head, pieces, last=False):
        """Write one message. A last one (goodbye, abort) goes out even from a failed world, for at most a
        heartbeat's time; the others stop once the world failed."""
        deadline = time.monotonic() + self.mesh.heartbeat
        give_up = (lambda: time.monotonic() > deadline) if last else (lambda: self.mesh.failed is not None)
        nbytes = sum(len(p) for p in pieces)
        try:
            if nbytes <= INLINE_BYTES:
                self._send_all(b"".join([head, *pieces]), give_up)
            else:
                self._send_all(head, give_up)
                if faults.wants_send(self.mesh.rank, nbytes):
                    self._send_first(pieces, nbytes // 2, give_up)
                    faults.fire(faults.current(), self.mesh.rank, self.mesh.size)
                self._send_first(pieces, nbytes, give_up)
        except OSError as e:
            self.mesh.lost(self.peer, f"its connection broke while rank {self.mesh.rank} sent to it ({e})")

    def _send_first(self, pieces, nbytes, give_up):
        """The first ``nbytes`` of the pieces, back to back."""
        for piece in pieces:
            if nbytes <= 0:
                return
            self._send_all(piece[:nbytes], give_up)
            nbytes -= len(piece)

    def _send_all(self, data, give_up):
        """sendall that stops when ``give_up()``: a peer that stopped reading (frozen) fills the socket's
        buffer, and a plain sendall would then wait for ever, holding this stream."""
        view, sent = memoryview(data).cast("B"), 0
        while sent < len(view):
            if give_up():
                return
            events = self.poller.poll(self.mesh.heartbeat / 5 * 1000)   # (poll: any descriptor number)
            if any(flags & select.POLLNVAL for _, flags in events):   # (the receive side closed the socket)
                raise ConnectionResetError("the connection is closed")
            if events:
                try:
                    sent += self.sock.send(view[sent:], socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass

    def _run(self):
        while True:
            with self.cond:
                while not self.queue:
                    if self.stopped:
                        return
                    self.cond.wait()
                head, pieces, request, last = self.queue[0]
                self.busy = True
            self._write(head, pieces, last)
            if last:
                try:
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
            with self.cond:
                self.queue.popleft()
                self.busy = False
                if request is not None:
                    request.done = True
            if last:
                return
            del head, pieces, request   # (views of the sent arrays: not held while waiting for the next)


class _Mesh:
    """One process's connections to every other rank of a world, and what arrived on them."""

    def __init__(self, rank, size, store, prefix, timeout, heartbeat):
        self.rank, self.size, self.store, self.prefix, self.timeout = rank, size, store, prefix, timeout
        self.heartbeat = heartbeat
        self.lock = threading.Lock()
        self.store_lock = threading.Lock()
        self.early = {}      # context -> [(src world rank, tag, bytes)] arrived before their receive
        self.posted = {}     # context -> [_Recv] in posting order
        self.failed = None   # the DistError that ended this world
        self.exited = set()  # ranks that said goodbye (closed their group)
        self.closed = threading.Event()
        self.seen = {}       # peer -> time.monotonic() of its last byte
        self.socks, self.senders = {}, {}

    # -- failures --------------------------------------------------------------------------------
    def fail(self, message: str, post: bool = True) -> None:
        """End this world with ``message`` (every pending and later operation raises it); tell the
        other ranks through the store too."""
        with self.lock:
            if self.failed is not None or self.closed.is_set():
                return
            self.failed = message
        if post:   # (on a thread of its own: the store's server may be the rank that failed)
            text = f"{message} (reported by rank {self.rank})".encode()
            threading.Thread(target=self.store_call, args=("set", self.prefix + "abort", text), daemon=True).start()

    def lost(self, peer, how):
        if peer not in self.exited:
            self.fail(f"rank {peer} died or was cut off: {how}")

    def check(self, peer, comm, receiving):
        """Raise if the world failed, or ``peer`` left and can't complete this operation."""
        if self.failed is not None:
            raise DistError(f"gloo (rank {self.rank}): {self.failed}")
        if peer is not None and peer in self.exited:
            verb = "send anything" if receiving else "receive"
            raise DistError(f"gloo: rank {peer} closed its process group and will never {verb}")
        if peer is None and receiving and all(m in self.exited for m in comm.members if m != self.rank):
            raise DistError("gloo: a receive from any rank, but every other rank closed its process group")

    def store_call(self, name, *args):
        """A store call that never raises (the store's server may be the rank that died)."""
        try:
            with self.store_lock:
                return getattr(self.store, name)(*args)
        except Exception:   # noqa: BLE001 (the failure at hand is already reported)
            return None

    # -- receiving -------------------------------------------------------------------------------
    def _take_posted(self, context, src, tag):
        posted = self.posted.get(context, ())
        for i, recv in enumerate(posted):
            if recv.matches(src, tag):
                return posted.pop(i)
        return None

    def post(self, recv, context):
        with self.lock:
            early = self.early.get(context, ())
            for i, (src, tag, data) in enumerate(early):
                if recv.matches(src, tag):
                    del early[i]
                    break
            else:
                self.posted.setdefault(context, []).append(recv)
                return
        recv.fill(src, data)

    def _receive(self, peer, sock):
        head = memoryview(bytearray(_HEADER.size))

        def alive():
            self.seen[peer] = time.monotonic()
        try:
            while _recv_exact(sock, head, alive):
                kind, context, tag, n = _HEADER.unpack(head)
                if kind == _DATA:
                    self._deliver(peer, sock, context, tag, n, alive)
                elif kind == _BYE:
                    with self.lock:
                        self.exited.add(peer)
                elif kind == _ABORT:
                    text = bytearray(n)
                    _recv_exact(sock, memoryview(text))
                    self.fail(text.decode(errors="replace"), post=False)
            self.lost(peer, "its connection closed without a goodbye")
        except OSError as e:
            self.lost(peer, f"its connection broke ({e})")
        finally:
            sock.close()

    def _deliver(self, peer, sock, context, tag, n, alive):
        with self.lock:
            recv = self._take_posted(context, peer, tag)
        if recv is not None and n <= len(recv.view):   # straight into the posted buffer
            _recv_exact(sock, recv.view[:n], alive)
            recv.finish(peer)
            return
        data = bytearray(n)
        _recv_exact(sock, memoryview(data), alive)
        if recv is not None:
            recv.fill(peer, data)   # (too long: it fails as truncated)
            return
        with self.lock:   # a receive may have been posted while the data came
            recv = self._take_posted(context, peer, tag)
            if recv is None:
                self.early.setdefault(context, []).append((peer, tag, data))
                return
        recv.fill(peer, data)

    # -- heartbeats and the store's abort key ----------------------------------------------------
    def _watch(self):
        """Heartbeats out and silent peers found: never waits on anything (a store call could: its server
        may be the frozen rank, or a user's call may hold the store's connection)."""
        interval = self.heartbeat / 5
        last = time.monotonic()
        while not self.closed.wait(interval):
            now = time.monotonic()
            if now - last > 2 * interval:   # this process was frozen itself: its peers' bytes wait unread
                for peer in self.seen:
                    self.seen[peer] = now
            last = now
            for peer, sender in self.senders.items():
                if peer not in self.exited:
                    sender.beat()
            for peer, seen in list(self.seen.items()):
                if peer not in self.exited and now - seen > self.heartbeat:
                    self.fail(f"rank {peer} sent nothing, not even a heartbeat, for {now - seen:.1f} s "
                              f"(frozen or cut off; MINIDL_DIST_HEARTBEAT={self.heartbeat:g})")

    def _poll_abort(self):
        """The store's abort key, read every heartbeat interval (a failure another rank saw first)."""
        while not self.closed.wait(self.heartbeat / 5) and self.failed is None:
            if self.store_call("check", [self.prefix + "abort"]):
                found = self.store_call("get", self.prefix + "abort")
                if found:
                    self.fail(found.decode(errors="replace"), post=False)

    def start(self, socks):
        self.socks = socks
        now = time.monotonic()
        for peer, sock in socks.items():
            self.seen[peer] = now
            self.senders[peer] = _Sender(self, peer, sock)
            threading.Thread(target=self._receive, args=(peer, sock), daemon=True,
                             name=f"minidl gloo rank {self.rank} from {peer}").start()
        threading.Thread(target=self._watch, daemon=True, name=f"minidl gloo rank {self.rank} heartbeat").start()
        threading.Thread(target=self._poll_abort, daemon=True, name=f"minidl gloo rank {self.rank} abort key").start()
        _meshes.add(self)

    def partition(self, rank, peer):
        """Fault injection: cut the connection to ``peer`` (both ways, no goodbye)."""
        if rank == self.rank and peer in self.socks:
            try:
                self.socks[peer].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def abort(self, message):
        """Tell every peer that this rank fails (an uncaught exception), by message and by store."""
        for peer, sender in self.senders.items():
            if peer not in self.exited:
                sender.send(_ABORT, 0, 0, message.encode(), last=True)
        posting = threading.Thread(target=self.store_call, args=("set", self.prefix + "abort", message.encode()),
                                   daemon=True)   # (the store's server may be frozen: wait a little only)
        posting.start()
        posting.join(timeout=1)
        self.closed.set()

    def close(self):
        """Say goodbye to every peer after what was sent (and stop watching them). A world that failed
        passes its failure on instead: a peer still waiting on this rank learns the cause (the rank that
        died), not only that this one left."""
        if self.closed.is_set():
            return
        self.closed.set()
        kind, text = (_BYE, b"") if self.failed is None else (_ABORT, self.failed.encode())
        for peer, sender in self.senders.items():
            if peer not in self.exited:
                sender.send(kind, 0, 0, text, last=True)
            else:
                sender.stop()   # (the peer said goodbye first: no last message; its thread may end now)


class SocketCommunicator(Communicator):
    """Ranks ``members`` (world ranks) of a mesh, talking on their own ``context``."""

    native = frozenset()
    spin = 0.0   # the receive threads need the GIL a spinning wait would hold

    def __init__(self, mesh, context, members, chunk_elements):
        super().__init__(chunk_elements)
        self.mesh, self.context, self.members = mesh, context, list(members)
        self.index = {m: i for i, m in enumerate(self.members)}
        self.rank, self.size = self.index[mesh.rank], len(self.members)
        self._splits = 0

    def _isend(self, buf, dst, tag):
        if not buf.flags.c_contiguous:
            raise ValueError("gloo: a send buffer must be contiguous")
        peer = self.members[dst]
        request = _Send(self.mesh, self, dst)
        self.mesh.check(peer, self, receiving=False)
        if peer == self.mesh.rank:
            self._to_self(buf, tag)
            request.done = True
            return request
        self.mesh.senders[peer].send(_DATA, self.context, tag, buf.reshape(-1).view(np.uint8).data, request)
        return request

    def _to_self(self, buf, tag):
        data = buf.reshape(-1).view(np.uint8).tobytes()
        mesh = self.mesh
        with mesh.lock:
            recv = mesh._take_posted(self.context, mesh.rank, tag)
            if recv is None:
                mesh.early.setdefault(self.context, []).append((mesh.rank, tag, data))
                return
        recv.fill(mesh.rank, data)

    def _irecv(self, buf, src, tag):
        recv = _Recv(self.mesh, self, buf, src, tag)
        self.mesh.post(recv, self.context)
        return recv

    def set_timeout(self, seconds):
        self.mesh.timeout = seconds

    def split(self, color, key):
        self._splits += 1
        mine = np.array([0 if color is None else 1, 0 if color is None else int(color), int(key)], np.int64)
        every = np.zeros((self.size, 3), np.int64)
        every[self.rank] = mine
        requests = []
        for r in range(self.size):
            if r != self.rank:
                requests += [self._isend(mine, r, _SPLIT_TAG), self._irecv(every[r], r, _SPLIT_TAG)]

        def timed_out(pending):
            return DistError(f"gloo: split of a communicator of {self.size} ranks timed out after "
                             f"{self.mesh.timeout} s waiting for rank(s) {sorted({p.peer for p in pending})}")
        wait_all(requests, time.monotonic() + self.mesh.timeout, timed_out)
        if color is None:
            return None
        same = sorted((k, r) for r, (has, c, k) in enumerate(every.tolist()) if has and c == int(color))
        digest = hashlib.blake2b(f"{self.context}/{self._splits}/{int(color)}".encode(), digest_size=8).digest()
        return SocketCommunicator(self.mesh, int.from_bytes(digest, "little", signed=True),
                                  [self.members[r] for _, r in same], self.chunk_elements)

    def host_name(self):
        return os.environ.get("MINIDL_DIST_HOSTNAME") or socket.gethostname()

    def close(self):
        if self.context == 0:
            self.mesh.close()


def address() -> str:
    """The address other ranks reach this one at: MINIDL_DIST_ADDR, else this host name's."""
    if os.environ.get("MINIDL_DIST_ADDR"):
        return os.environ["MINIDL_DIST_ADDR"]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable ``name`` (``default`` when unset)."""
    text = os.environ.get(name, "")
    try:
        seconds = float(text) if text else default
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {text!r}")
    return seconds


def _heartbeat() -> float:
    return env_seconds("MINIDL_DIST_HEARTBEAT", HEARTBEAT_SECONDS)


def _connect(rank, size, store, prefix, timeout):
    """The mesh's sockets, peer -> socket: rank r connects to every lower rank and accepts the higher."""
    addr = address()
    listener = socket.create_server((addr, 0), backlog=max(size, 8))
    generation = int(prefix.rsplit("/", 2)[-2])
    socks = {}
    try:
        store.set(f"{prefix}addr/{rank}", f"{addr}:{listener.getsockname()[1]}".encode())
        deadline = time.monotonic() + timeout
        for peer in range(rank):
            host, port = store.get(f"{prefix}addr/{peer}").decode().rsplit(":", 1)
            sock = socket.create_connection((host, int(port)), timeout=max(deadline - time.monotonic(), 0.1))
            sock.sendall(_HELLO.pack(_MAGIC, generation, rank))
            socks[peer] = sock
        while len(socks) < size - 1:
            listener.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                missing = sorted(set(range(rank + 1, size)) - set(socks))
                raise DistError(f"gloo: rank {rank} waited {timeout} s for rank(s) {missing} to connect") from None
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            hello = bytearray(_HELLO.size)
            if not _recv_exact(sock, memoryview(hello)):
                sock.close()
                continue
            magic, gen, peer = _HELLO.unpack(hello)
            if magic != _MAGIC or gen != generation or not rank < peer < size or peer in socks:
                sock.close()   # (a stranger, or a rank of another start)
                continue
            socks[peer] = sock
    except BaseException:
        for sock in socks.values():
            sock.close()
        raise
    finally:
        listener.close()
    for sock in socks.values():
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return socks


def world_communicator(chunk_elements=DEFAULT_CHUNK, *, store=None, rank=-1, world_size=-1, timeout=300.0, **_):
    """This rank's communicator over all ``world_size`` ranks, which meet through ``store``
    (every rank calls it; each start on a store makes a new mesh)."""
    if store is None or not all(hasattr(store, m) for m in ("set", "get", "add", "check")):
        raise ValueError("init_process_group('gloo'): pass store= a Store (set/get/add/check), "
                         f"got {type(store).__name__}")
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"init_process_group('gloo'): rank {rank} and world_size {world_size} must satisfy "
                         f"0 <= rank < world_size")
    heartbeat = _heartbeat()
    generation = store.add(f"minidl/gloo/starts/{rank}", 1)   # every rank counts its own starts alike
    prefix = f"minidl/gloo/{generation}/"
    mesh = _Mesh(rank, world_size, store, prefix, float(timeout), heartbeat)
    mesh.start(_connect(rank, world_size, store, prefix, float(timeout)))
    faults.on_partition(mesh.partition)
    faults.start_idle(rank, world_size)
    return SocketCommunicator(mesh, 0, range(world_size), chunk_elements)


@atexit.register
def _goodbye():
    """A process that ends without closing its group still tells its peers it left on purpose."""
    for mesh in list(_meshes):
        mesh.close()
        for sender in mesh.senders.values():
            if sender.thread is not None:
                sender.thread.join(timeout=5)


def abort_on_uncaught_exception() -> None:
    """An uncaught exception on this rank is printed, then every other rank's pending and next
    operation fails naming this rank (an abort message to each and a key in the store), and this
    process ends; the others are not killed, and the launcher decides what follows."""
    if getattr(sys.excepthook, "minidl_gloo", False):   # (once per process, however many groups)
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        for mesh in list(_meshes):
            if mesh.closed.is_set():
                continue
            mesh.abort(f"rank {mesh.rank} failed with an uncaught exception: {kind.__name__}: {value}")
            for sender in mesh.senders.values():
                if sender.thread is not None:
                    sender.thread.join(timeout=2)
    hook.minidl_gloo = True
    sys.excepthook = hook
