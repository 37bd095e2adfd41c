"""Links (minidl.dist.communicators.links): a Listener and connectors as threads of this process,
then connectors as processes that are killed, frozen, or killed half-way through a message.
The oracles are the bytes sent: each message arrives whole and in order, or not at all."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from minidl.dist import faults
from minidl.dist.communicators import links
from minidl.dist.communicators.base import DistError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "links_script.py")


class Side:
    """One side's callbacks: what arrived per peer (as bytes), and each link's end."""

    def __init__(self, welcome=()):
        self.cond = threading.Condition()
        self.got, self.ends, self.links, self.welcome = {}, {}, {}, list(welcome)

    def on_hello(self, link):
        self.links[link.peer] = link
        return self.welcome

    def on_message(self, link, parts):
        with self.cond:
            self.got.setdefault(link.peer, []).append([bytes(p) for p in parts])
            self.cond.notify_all()

    def on_end(self, link, why):
        with self.cond:
            assert link.peer not in self.ends, f"on_end called twice for {link}"
            self.ends[link.peer] = why
            self.cond.notify_all()

    def wait(self, done, seconds=10):
        with self.cond:
            assert self.cond.wait_for(done, seconds), f"timed out: got {self.counts()}, ends {self.ends}"

    def counts(self):
        return {peer: len(messages) for peer, messages in self.got.items()}


@pytest.fixture
def listener():
    made = []

    def make(side, **kw):
        made.append(links.Listener(0, side.on_hello, side.on_message, side.on_end, host="127.0.0.1", **kw))
        return made[-1]
    yield make
    for one in made:
        one.close()


def connect(listener, me, side, words=()):
    return links.connect(listener.address, me, words, side.on_message, side.on_end)


def messages(seed, n):
    """n messages of 0..3 parts, 0 B..4 MiB, mixing bytes and numpy arrays."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        parts = []
        for _ in range(rng.integers(0, 4)):
            size = int(rng.choice([0, 1, 100, 70_000, 1 << 20, 4 << 20], p=[.15, .2, .3, .2, .1, .05]))
            data = rng.integers(0, 256, size, dtype=np.uint8)
            parts.append(data.tobytes() if i % 2 else data.view(np.uint8))
        out.append(parts)
    return out


def as_bytes(message):
    return [bytes(p) for p in message]


def test_messages_arrive_whole_and_in_order_both_ways(listener):
    server, workers = Side(), [Side() for _ in range(3)]
    where = listener(server)
    conns = [connect(where, 10 + i, side) for i, side in enumerate(workers)]
    sent_up = {10 + i: messages(i, 40) for i in range(3)}
    sent_down = {10 + i: messages(100 + i, 40) for i in range(3)}

    def talk(i):
        for m in sent_up[10 + i]:
            conns[i].send(m)
    threads = [threading.Thread(target=talk, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for peer, ms in sent_down.items():
        for m in ms:
            server.links[peer].send(m)
    for t in threads:
        t.join()
    server.wait(lambda: server.counts() == {p: 40 for p in sent_up})
    for peer, ms in sent_up.items():
        assert server.got[peer] == [as_bytes(m) for m in ms]
    for i, side in enumerate(workers):
        side.wait(lambda side=side: side.counts() == {0: 40})
        assert side.got[0] == [as_bytes(m) for m in sent_down[10 + i]]
    assert not server.ends and not any(side.ends for side in workers)


def test_the_handshake_gives_words_both_ways_and_a_refusal_its_reason(listener):
    server = Side(welcome=[5, -6, 2**40])
    where = listener(server)
    link = connect(where, 4, Side(), words=[1, -2, 3])
    assert (link.me, link.peer, link.words) == (4, 0, [5, -6, 2**40])
    assert (server.links[4].me, server.links[4].peer, server.links[4].words) == (0, 4, [1, -2, 3])

    def refuse(link):
        raise RuntimeError(f"the job has ended (peer {link.peer})")
    closed = links.Listener(0, refuse, None, None, host="127.0.0.1")
    with pytest.raises(DistError, match=rf"{closed.address} refused 9: the job has ended \(peer 9\)"):
        links.connect(closed.address, 9, [], None, None)
    closed.close()


def test_a_connect_to_nothing_names_the_address():
    with socket.socket() as s:   # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(DistError, match=f"could not connect to {address}"):
        links.connect(address, 1, [], None, None, timeout=5)


def test_a_listener_that_does_not_answer_in_time_is_named():
    def slow(link):
        time.sleep(2)
        return []
    where = links.Listener(0, slow, None, lambda link, why: None, host="127.0.0.1")
    with pytest.raises(DistError, match=f"no answer from {where.address} within 0.5 s"):
        links.connect(where.address, 1, [], None, None, timeout=0.5)
    where.close()


def test_an_on_message_that_raises_ends_its_link_saying_so(listener):
    server, worker = Side(), Side()
    server.on_message = lambda link, parts: 1 / 0
    link = connect(listener(server), 6, worker)
    link.send([b"boom"])
    server.wait(lambda: 6 in server.ends)
    worker.wait(lambda: 0 in worker.ends)
    assert "on_message failed on a message from peer 6: ZeroDivisionError" in server.ends[6]


def test_a_goodbye_is_why_none_on_both_sides_and_later_sends_raise(listener):
    server, worker = Side(), Side()
    link = connect(listener(server), 1, worker)
    big = np.arange(1 << 20, dtype=np.uint8)
    link.send([big])   # (queued on the sending thread: it goes before the goodbye)
    link.close()
    server.wait(lambda: 1 in server.ends)
    worker.wait(lambda: 0 in worker.ends)
    assert server.got[1] == [[big.tobytes()]] and server.ends == {1: None} and worker.ends == {0: None}
    assert link.lost is None and server.links[1].lost is None
    with pytest.raises(links.LinkLost, match="peer 0"):
        link.send([b"late"])
    with pytest.raises(links.LinkLost, match="peer 1"):
        server.links[1].send([b"late"])


def test_a_cut_gives_a_reason_on_both_sides(listener):
    server, worker = Side(), Side()
    link = connect(listener(server), 2, worker)
    server.links[2].cut()
    server.wait(lambda: 2 in server.ends)
    worker.wait(lambda: 0 in worker.ends)
    assert "cut by 0" in server.ends[2] and server.links[2].lost == server.ends[2]
    assert "peer 0 closed the link without a goodbye" in worker.ends[0]
    with pytest.raises(links.LinkLost, match="peer 0"):
        link.send([b"late"])


def test_a_partition_fault_cuts_the_named_link_only(listener, monkeypatch):
    server, worker, other = Side(), Side(), Side()
    where = listener(server)
    connect(where, 3, other)
    connect(where, 4, worker)
    monkeypatch.setenv("MINIDL_FAULT", "rank=4 at=send do=partition peer=0")
    faults.fire(faults.current(), 4, 0)
    worker.wait(lambda: 0 in worker.ends)
    server.wait(lambda: 4 in server.ends)
    assert "cut by 4" in worker.ends[0] and "without a goodbye" in server.ends[4]
    server.links[3].send([b"still here"])
    other.wait(lambda: other.counts() == {0: 1})
    assert not other.ends


def test_a_long_on_message_is_not_the_peers_silence(listener):
    server, worker = Side(), Side()
    server.on_message = lambda link, parts: time.sleep(2.5)
    link = links.connect(listener(server, silence=1).address, 1, [], worker.on_message, worker.on_end, silence=1)
    link.send([b"slow"])
    time.sleep(3)
    assert not server.ends and not worker.ends
    link.close()


def test_a_part_must_be_contiguous(listener):
    link = connect(listener(Side()), 1, Side())
    with pytest.raises(ValueError, match="contiguous"):
        link.send([np.zeros((4, 4))[:, 1]])


# -- real processes ------------------------------------------------------------------------------
def child(address, me, *args, env=()):
    proc = subprocess.Popen([sys.executable, SCRIPT, address, str(me), *args], stdout=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": ROOT, **dict(env)}, text=True)
    assert proc.stdout.readline().strip() == "linked"
    return proc


def ended_within(side, peer, seconds):
    start = time.monotonic()
    side.wait(lambda: peer in side.ends, seconds + 5)
    return time.monotonic() - start


def test_a_killed_worker_is_reported_at_once(listener):
    server = Side()
    where = listener(server)
    proc = child(where.address, 7)
    try:
        proc.kill()
        assert ended_within(server, 7, 2) < 2
        assert "peer 7 closed the link without a goodbye" in server.ends[7]
    finally:
        proc.kill()
        proc.wait()


def test_a_worker_that_exits_says_goodbye_after_its_message(listener):
    server = Side()
    where = listener(server)
    proc = child(where.address, 9, "exit")
    try:
        assert proc.wait(10) == 0
        server.wait(lambda: 9 in server.ends)
        assert server.got[9] == [[b"head", bytes([7]) * (1 << 20)]] and server.ends[9] is None
    finally:
        proc.kill()
        proc.wait()


def test_a_frozen_worker_is_named_after_the_silence(listener):
    server = Side()
    where = listener(server, silence=1)
    proc = child(where.address, 8, env={"MINIDL_DIST_HEARTBEAT": "1"})
    try:
        time.sleep(1.5)   # heartbeats keep it open meanwhile
        assert not server.ends
        proc.send_signal(signal.SIGSTOP)
        assert ended_within(server, 8, 3) < 3
        assert "peer 8 sent nothing, not even a heartbeat" in server.ends[8]
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_a_worker_killed_half_way_through_a_message_delivers_none_of_it(listener):
    server = Side()
    where = listener(server)
    proc = child(where.address, 5, "send", env={"MINIDL_FAULT": "rank=5 at=send do=kill"})
    try:
        assert proc.wait(10) == -signal.SIGKILL
        server.wait(lambda: 5 in server.ends)
        assert server.got == {} and "peer 5" in server.ends[5]
    finally:
        proc.kill()
        proc.wait()
