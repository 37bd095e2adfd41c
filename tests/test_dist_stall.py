"""The stall inspector: a rank waiting longer than the group's stall time logs once what it waits
on and which ranks have not arrived, then keeps waiting until they come or the timeout ends it.
Late ranks are held on events (released by the log line itself), never by sleeps."""
import logging
import threading
from datetime import timedelta
from types import SimpleNamespace

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl.dist.algorithms.channel import Channel
from minidl.dist.communicators.base import Request
from minidl.nn.parallel import DistributedDataParallel

sim = dist.sim


class StallLog(logging.Handler):
    """Collects minidl.dist's stall lines; ``seen`` is set once ``expected`` of them name ``about``.
    Tests look only at the lines about the wait they cause: on a loaded machine any other wait
    (the group's start, DDP's broadcast) may outlast the short stall time too."""

    def __init__(self, expected=1, about=""):
        super().__init__()
        self.lines, self.expected, self.about, self.seen = [], expected, about, threading.Event()

    def emit(self, record):
        line = record.getMessage()
        if "still waiting" in line:
            self.lines.append(line)
            if len(self.naming(self.about)) >= self.expected:
                self.seen.set()

    def naming(self, text):
        return [line for line in self.lines if text in line]


@pytest.fixture
def stall_log(request):
    handler = StallLog(*getattr(request, "param", ()))
    logger = logging.getLogger("minidl.dist")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


ALL_REDUCE = "all_reduce (collective #1 of the group) in the group of ranks [0, 1, 2] has waited 0.2 s"


@pytest.mark.parametrize("stall_log", [(2, ALL_REDUCE)], indirect=True)
def test_ranks_waiting_on_a_late_rank_log_once_and_keep_waiting(stall_log):
    """Rank 2 joins the all-reduce only after both waiting ranks logged; the result is still right."""
    def fn(rank):
        if rank == 2:
            assert stall_log.seen.wait(60), "no stall was logged"
        t = minidl.from_numpy(np.full(4, rank + 1.0))
        dist.all_reduce(t)
        return t.numpy().tolist()
    assert sim.run(3, fn, stall_seconds=0.2, algorithm="ring") == [[6.0] * 4] * 3
    lines = stall_log.naming(ALL_REDUCE)
    assert sorted(line.split(":")[0] for line in lines) == ["rank 0", "rank 1"], stall_log.lines   # once each
    # at 3 ranks the agreement's first step: rank 0 hands its part to rank 1, which waits for rank 2
    assert any(line.startswith("rank 1: ") and "rank(s) [2] did not send what rank 1 waits for" in line
               for line in lines), stall_log.lines


@pytest.mark.parametrize("stall_log", [(1, "recv from rank 1 (tag 5)")], indirect=True)
def test_a_receive_names_its_peer_and_tag(stall_log):
    def fn(rank):
        t = minidl.zeros(3)
        if rank == 0:
            dist.recv(t, src=1, tag=5)
            return t.tolist()
        assert stall_log.seen.wait(60), "no stall was logged"
        dist.send(minidl.ones(3), dst=0, tag=5)
    assert sim.run(2, fn, stall_seconds=0.2, timeout=600)[0] == [1.0] * 3
    assert stall_log.naming("recv from rank 1 (tag 5)") == [
        "rank 0: recv from rank 1 (tag 5) in the group of ranks [0, 1] has waited 0.2 s: rank(s) [1] did not send "
        "what rank 0 waits for; still waiting (timeout 600 s)"], stall_log.lines


def test_ddp_ranks_running_5_and_4_steps(stall_log):
    """Rank 1 stops after 4 steps (and stays, as a process stuck elsewhere would): rank 0's fifth
    step logs rank 1 as missing after the stall time, then times out with the usual error. (The
    timeout, the group's, must outlast any pause of a loaded machine in the steps before.)"""
    done = threading.Event()

    def fn(rank):
        minidl.manual_seed(0)
        model = DistributedDataParallel(minidl.nn.Linear(3, 2))
        try:
            for _ in range(5 if rank == 0 else 4):
                model(minidl.ones(2, 3)).sum().backward()
        except dist.DistError as e:
            return str(e)
        finally:
            if rank == 0:
                done.set()
            else:
                assert done.wait(60)
    found = sim.run(2, fn, stall_seconds=0.2, timeout=10)
    what, _, rest = found[0].partition(": timed out after 10 s on rank 0: ")
    assert what.startswith("all_reduce (collective #") and rest == "rank(s) [1] did not send what rank 0 waits for", \
        found
    assert stall_log.naming(f"rank 0: {what} in the group") == [
        f"rank 0: {what} in the group of ranks [0, 1] has waited 0.2 s: rank(s) [1] did not send what rank 0 waits "
        "for; still waiting (timeout 10 s)"], stall_log.lines


def test_a_collective_on_sub_channels_logs_its_stall_once(stall_log):
    """The hierarchical all-reduce waits on its host's channel, then on the leaders' (both sub-channels
    of the collective's): a peer late on both is one stall line for the collective, not one per channel."""
    class Late(Request):
        kind, peer = "recv", 1

        def __init__(self, arrived):
            self.test = arrived

    comm = SimpleNamespace(rank=0, size=2)
    ch = Channel(comm, "all_reduce", 60.0, [0, 1], stall=0.01)
    local, leaders = ch.sub(comm, [0, 1]), ch.sub(comm, [0, 2])
    local.wait([Late(lambda: bool(stall_log.lines))])   # arrives once the stall was logged
    polls = iter([False, True])
    leaders.wait([Late(lambda: next(polls))])   # late again, past the stall time: no second line
    assert stall_log.lines == ["rank 0: all_reduce in the group of ranks [0, 1] has waited 0.01 s: rank(s) [1] did "
                               "not send what rank 0 waits for; still waiting (timeout 60 s)"]


def test_stall_seconds_from_the_environment_and_bad_values(monkeypatch):
    monkeypatch.setenv("MINIDL_DIST_STALL_SECONDS", "0.5")
    assert sim.run(1, lambda rank: dist.get_backend() and _config().stall_seconds) == [0.5]
    assert sim.run(1, lambda rank: _config().stall_seconds, stall_seconds=3) == [3.0]
    monkeypatch.setenv("MINIDL_DIST_STALL_SECONDS", "soon")
    with pytest.raises(ValueError, match=r"stall_seconds \(or MINIDL_DIST_STALL_SECONDS\) must be a number of "
                                         r"seconds, got 'soon'"):
        sim.run(1, lambda rank: None)
    monkeypatch.delenv("MINIDL_DIST_STALL_SECONDS")
    with pytest.raises(ValueError, match="stall_seconds .* must be positive, got 0"):
        sim.run(1, lambda rank: None, stall_seconds=0)
    assert sim.run(1, lambda rank: _config().stall_seconds) == [60.0]


@pytest.mark.parametrize("option, value, env, message", [
    ("stall_seconds", [1], None, "stall_seconds (or MINIDL_DIST_STALL_SECONDS) must be a number of seconds, got [1]"),
    ("timeout", [1], None, "timeout (or MINIDL_DIST_TIMEOUT) must be a number of seconds, got [1]"),
    ("timeout", "soon", None, "timeout (or MINIDL_DIST_TIMEOUT) must be a number of seconds, got 'soon'"),
    ("timeout", None, "soon", "timeout (or MINIDL_DIST_TIMEOUT) must be a number of seconds, got 'soon'"),
    ("timeout", 0, None, "timeout (or MINIDL_DIST_TIMEOUT) must be positive, got 0"),
    ("timeout", timedelta(seconds=-1), None, "timeout (or MINIDL_DIST_TIMEOUT) must be positive, got "
                                             "datetime.timedelta(days=-1, seconds=86399)"),
])
def test_bad_timeouts_are_named(monkeypatch, option, value, env, message):
    if env is not None:
        monkeypatch.setenv("MINIDL_DIST_TIMEOUT", env)
    with pytest.raises(ValueError) as info:
        sim.run(1, lambda rank: None, **{option: value})
    assert str(info.value) == "init_process_group: " + message


def test_timeout_from_a_timedelta_or_the_environment(monkeypatch):
    assert sim.run(1, lambda rank: _config().timeout, timeout=timedelta(minutes=2)) == [120.0]
    monkeypatch.setenv("MINIDL_DIST_TIMEOUT", "7.5")
    assert sim.run(1, lambda rank: _config().timeout) == [7.5]


def _config():
    from minidl.dist.state import resolve
    return resolve(None, "test").config
