"""minidl.dist.ps's server checkpoints on simulated ranks (real SIGKILLs: tests/test_ps_recovery.py):
what ps.init(resume=True) refuses, the corruption the restart names, and the bad options."""
import os

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl.dist import ps
from minidl.dist.ps.__main__ import main as restart_main
from minidl.dist.ps.durability import Checkpoints


def train(folder, steps=4, shape=(3, 4), resume=False, durable=True, **options):
    """Two workers and a server; each step both push ones (SGD lr 1); the value worker 0 pulls last."""
    def run(rank):
        if ps.init(1, "bsp", checkpoint_dir=folder, durable=durable, resume=resume, **options) == "server":
            return None
        ps.register("w", minidl.zeros(*shape), optimizer=ps.SGD(lr=1.0))
        start = ps.current_clock()
        for _ in range(start, steps):
            ps.pull("w")
            ps.push("w", minidl.ones(*shape))
            ps.clock()
        value = ps.pull("w").numpy()
        ps.shutdown()
        return start, value
    return dist.sim.run(3, run)[0]


def test_a_resumed_job_goes_on_from_the_checkpoint(tmp_path):
    """A job of 4 BSP steps, then one resumed to 6: it starts at clock 4 and ends where 6 steps end."""
    assert train(tmp_path, 4)[0] == 0
    start, value = train(tmp_path, 6, resume=True)
    assert start == 4
    np.testing.assert_array_equal(value, np.full((3, 4), -12.0))
    # (a server restarted by hand later still drops the redone iterations' pushes: its checkpoints say so)
    assert Checkpoints(tmp_path / "server0").load()[1]["redone_before"] == 4


def test_a_checkpoint_of_another_job_is_refused(tmp_path):
    train(tmp_path, 2)
    with pytest.raises(RuntimeError, match=r"key 0 is the checkpoint this server resumed from holds 'w' \[3, 4\] "
                                           r"float32 \(a checkpoint of another job\?\)"):
        train(tmp_path, 2, shape=(5,), resume=True)


def test_resuming_without_a_checkpoint_is_named_on_every_rank(tmp_path):
    with pytest.raises(ValueError, match=r"resume=True\): parameter server 0: no checkpoint in .*server0"):
        train(tmp_path / "empty", resume=True)


@pytest.mark.parametrize("options, words", [
    (dict(checkpoint_every=0), "checkpoint_every=0 must be a number of clocks >= 1"),
    (dict(checkpoint_seconds=0), "checkpoint_seconds=0 must be a number of seconds > 0"),
    (dict(checkpoint_dir=None, durable=True), r"ps.init\(durable=True\): give checkpoint_dir too"),
    (dict(checkpoint_dir=None, resume=True), r"ps.init\(resume=True\): give checkpoint_dir too")])
def test_bad_checkpoint_options_are_named(tmp_path, options, words):
    options = {"checkpoint_dir": tmp_path, **options}
    with pytest.raises(ValueError, match=words):
        dist.sim.run(2, lambda rank: ps.init(1, "asp", **options))


def test_a_checkpoint_folder_that_cannot_be_written_is_named_on_every_rank(tmp_path):
    """(A folder under a regular file: read-only folders do not bind root, which the tests may run as.)"""
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=r"parameter server 0: cannot write to .*file/server0"):
        dist.sim.run(2, lambda rank: ps.init(1, "asp", checkpoint_dir=tmp_path / "file", durable=True))


def test_checkpoints_need_links(monkeypatch, tmp_path):
    monkeypatch.setenv("MINIDL_PS_TRANSPORT", "group")
    with pytest.raises(ValueError, match="server recovery needs links"):
        dist.sim.run(2, lambda rank: ps.init(1, "asp", checkpoint_dir=tmp_path))


def flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupted_checkpoint_is_named_and_not_loaded(tmp_path, capsys):
    train(tmp_path, 2)
    (checkpoint,) = (tmp_path / "server0").glob("checkpoint-*.safetensors")
    flip(checkpoint, checkpoint.stat().st_size // 2)
    assert restart_main(["--resume", str(tmp_path)]) == 2
    assert f"{checkpoint} is corrupted" in capsys.readouterr().err


def test_a_corrupted_log_is_named_and_not_loaded(tmp_path, capsys):
    """The log after the last checkpoint holds the final shutdowns; its first record damaged."""
    train(tmp_path, 2, checkpoint_every=1000)
    (log,) = (tmp_path / "server0").glob("wal-*.log")
    assert log.stat().st_size > 0
    flip(log, 30)
    assert restart_main(["--resume", str(tmp_path)]) == 2
    assert str(log) in capsys.readouterr().err


def test_resume_without_a_checkpoint_is_named(tmp_path, capsys):
    assert restart_main(["--resume", str(tmp_path)]) == 2
    assert "no server checkpoints there" in capsys.readouterr().err
    os.makedirs(tmp_path / "server0")
    assert restart_main(["--resume", str(tmp_path), "--server", "0"]) == 2
    assert "no checkpoint in" in capsys.readouterr().err


@pytest.mark.parametrize("servers, options, words", [
    (1, {}, r"replicate=True\): num_servers=1; a range is kept on a second server"),
    (2, {"checkpoint_dir": "x"}, r"replicate=True, checkpoint_dir=...\): choose one")])
def test_bad_replication_options_are_named(servers, options, words):
    with pytest.raises(ValueError, match=words):
        dist.sim.run(3, lambda rank: ps.init(servers, "asp", replicate=True, **options))


def test_replication_needs_links(monkeypatch):
    monkeypatch.setenv("MINIDL_PS_TRANSPORT", "group")
    with pytest.raises(ValueError, match="replication needs links"):
        dist.sim.run(3, lambda rank: ps.init(2, "asp", replicate=True))


def test_a_replicated_job_without_a_death_gives_the_same_values():
    """2 servers, replicate=True, BSP, no failure: each worker pushes (rank + 1) per step under SGD lr 1;
    the backups' replicas are fed every push, and the values are those of the plain sum."""
    def run(rank):
        if ps.init(2, "bsp", replicate=True) == "server":
            return None
        ps.register("w", minidl.zeros(5, dtype=minidl.float64), optimizer=ps.SGD(lr=1.0))
        for _ in range(6):
            ps.pull("w")
            ps.push("w", minidl.ones(5, dtype=minidl.float64) * (rank + 1))
            ps.clock()
        value = ps.pull("w").numpy()
        ps.shutdown()
        return value
    np.testing.assert_array_equal(dist.sim.run(4, run)[0], np.full(5, -18.0))


def test_a_resumed_job_restores_row_sharded_tables(tmp_path):
    """A table registered with zeros (6 x 3) and one made on the servers (register_embedding, 5 x 2), on
    2 servers, each step both workers push ones at rows 1 and 4 (SGD lr 1): 2 steps, then a resumed job
    starts at clock 2 and does 2 more; rows 1 and 4 end 8 below where they started, the others where
    they started."""
    rows = minidl.tensor([1, 4])

    def run(rank, resume):
        if ps.init(2, "bsp", checkpoint_dir=tmp_path, checkpoint_every=1, resume=resume) == "server":
            return None
        ps.register("t", minidl.zeros(6, 3), optimizer=ps.SGD(lr=1.0), sparse=True)
        ps.register_embedding("e", 5, 2, optimizer=ps.SGD(lr=1.0), init_std=0.5, seed=3)
        first, start = ps.pull("e").numpy(), ps.current_clock()
        for _ in range(start, 2 + 2 * resume):
            for name, width in (("t", 3), ("e", 2)):
                ps.push(name, minidl.sparse_coo_tensor(rows.unsqueeze(0), minidl.ones(2, width),
                                                       (6, width) if name == "t" else (5, width)))
            ps.clock()
        values = ps.pull("t").numpy(), ps.pull("e").numpy()
        ps.shutdown()
        return first, start, values
    first, _, _ = dist.sim.run(4, lambda rank: run(rank, False))[0]
    _, start, (t, e) = dist.sim.run(4, lambda rank: run(rank, True))[0]
    assert start == 2
    expected_t = np.zeros((6, 3), np.float32)
    expected_t[[1, 4]] = -8.0
    expected_e = first.copy()
    expected_e[[1, 4]] -= 8.0
    np.testing.assert_array_equal(t, expected_t)
    np.testing.assert_allclose(e, expected_e, rtol=0, atol=1e-6)


class QueuedEnd:
    """A transport end holding requests that came together; it keeps the server's replies."""
    tolerant = True

    def __init__(self, events):
        self.events, self.replies = list(events), []

    def next(self, timeout=None):
        return self.events.pop(0) if self.events else None

    def reply(self, worker, status, body=None, seq=0):
        self.replies.append((worker, status, seq))
        return []

    def close(self, flush=True):
        pass


@pytest.mark.parametrize("pushes", [5, 70])
def test_durable_requests_that_waited_together_share_one_sync(tmp_path, monkeypatch, pushes):
    """Two registrations, the pushes and two shutdowns waiting at once: the log is synced once per 64 of
    them (BATCH: a group commit), every request is applied once and answered after the sync of its group."""
    from minidl.dist.ps import durability, recovery
    from minidl.dist.ps import protocol as P
    from minidl.dist.ps.server import Server
    syncs, order = [], []
    real = durability.os.fdatasync
    monkeypatch.setattr(durability.os, "fdatasync", lambda fd: (syncs.append(fd), order.append("sync"), real(fd)))
    opt, events, seq = ps.SGD(lr=1.0), [], {0: 0, 1: 0}

    def request(worker, kind, payload=(), **words):
        seq[worker] += 1
        header = P.header(kind, **words)
        header[P.SEQ] = seq[worker]
        parts = P.seal(header, payload)
        events.append(("request", worker, np.frombuffer(parts[0], np.int64).tolist(), parts[1:]))
    for w in (0, 1):
        request(w, P.REGISTER, [P.text("w"), minidl.tensor([3]), minidl.tensor(opt.words() + [0.0],
                dtype=minidl.float64), minidl.zeros(3)], key=0, numel=3, name_len=1, ndim=1, optimizer=opt.kind)
    for i in range(pushes):
        request(i % 2, P.PUSH, [minidl.ones(3)], key=0, numel=3)
    for w in (0, 1):
        request(w, P.SHUTDOWN)
    end = QueuedEnd(events)
    end.reply = lambda worker, status, body=None, seq=0: (order.append("reply"), end.replies.append(status))
    server = Server(end, 0, 1, 2, "asp", 0, "shrink")
    server.job = {"consistency": "asp", "staleness": 0, "on_worker_failure": "shrink", "drop_stale_after": None,
                  "servers": 1, "server": 0, "workers": 2, "rank": 2, "checkpoint_dir": str(tmp_path),
                  "checkpoint_every": None, "checkpoint_seconds": 3600.0, "durable": True, "resume": False}
    recovery.start(server)
    server.serve()
    total = pushes + 4
    assert order == ["sync"] + ["reply"] * min(total, 64) + (["sync"] + ["reply"] * (total - 64) if total > 64
                                                              else []), order
    assert end.replies == [P.OK] * total
    np.testing.assert_array_equal(server.shards[0].param.detach().numpy(), np.full(3, -pushes, np.float32))
