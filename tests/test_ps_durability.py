"""The parameter server's storage layer (minidl.dist.ps.durability): checkpoints that never load damaged, a
write-ahead log whose torn tail is dropped and whose corruption is reported, and the two kill points."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minidl
from minidl.dist.ps import durability as d


def _state(seed):
    rng = np.random.default_rng(seed)
    return {"shard": {"w": rng.standard_normal((4, 3)).astype(np.float32), "b": rng.standard_normal(5)},
            "step": int(seed), "clocks": [seed, seed + 1], "name": f"s{seed}", "lr": 0.5, "none": None}


def _to_minidl(state):
    if isinstance(state, np.ndarray):
        return minidl.tensor(state)
    if isinstance(state, dict):
        return {k: _to_minidl(v) for k, v in state.items()}
    return [_to_minidl(v) for v in state] if isinstance(state, list) else state


def _assert_same(loaded, expected):
    if isinstance(expected, np.ndarray):
        got = loaded.numpy()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    elif isinstance(expected, dict):
        assert sorted(loaded) == sorted(expected)
        for k in expected:
            _assert_same(loaded[k], expected[k])
    elif isinstance(expected, list):
        assert len(loaded) == len(expected)
        for a, b in zip(loaded, expected):
            _assert_same(a, b)
    else:
        assert type(loaded) is type(expected) and loaded == expected


def _checkpoint_files(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith("checkpoint-"))


# ----------------------------------------------------------------------------- checkpoints
def test_checkpoints_round_trip_and_keep_only_the_newest(tmp_path):
    ck = d.Checkpoints(str(tmp_path / "ck"))
    assert ck.latest() is None
    for n in (1, 2, 3):
        assert ck.save(_to_minidl(_state(n))) == n
        assert ck.latest() == n
        assert _checkpoint_files(ck.folder) == [f"checkpoint-{n:08d}.safetensors"]
        got_n, state = ck.load()
        assert got_n == n
        _assert_same(state, _state(n))
    manifest = json.loads((tmp_path / "ck" / "LATEST").read_text())
    assert manifest["n"] == 3 and manifest["bytes"] == os.path.getsize(tmp_path / "ck" / manifest["file"])


def test_load_of_an_empty_folder_says_no_checkpoint(tmp_path):
    with pytest.raises(d.DurabilityError, match="no checkpoint in .*no LATEST"):
        d.Checkpoints(str(tmp_path)).load()


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_a_flipped_byte_is_never_loaded(tmp_path, where):
    ck = d.Checkpoints(str(tmp_path))
    ck.save(_to_minidl(_state(1)))
    path = tmp_path / "checkpoint-00000001.safetensors"
    data = bytearray(path.read_bytes())
    at = {"start": 0, "middle": len(data) // 2, "end": len(data) - 1}[where]
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(d.DurabilityError, match=r"checkpoint-00000001\.safetensors is corrupted: CRC-32"):
        ck.load()


def test_a_truncated_or_missing_checkpoint_is_named(tmp_path):
    ck = d.Checkpoints(str(tmp_path))
    ck.save(_to_minidl(_state(1)))
    path = tmp_path / "checkpoint-00000001.safetensors"
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(d.DurabilityError, match=r"checkpoint-00000001\.safetensors is corrupted: it has"):
        ck.load()
    path.unlink()
    with pytest.raises(d.DurabilityError, match=r"checkpoint-00000001\.safetensors.*cannot be read"):
        ck.load()


@pytest.mark.parametrize("text", ['{"n": 1, "file": "checkpoint-00000001.safetensors"', '{"n": 1}',
                                  '{"n": 1, "file": "../x", "bytes": 1, "crc32": "00000000"}'])
def test_a_damaged_latest_is_named(tmp_path, text):
    ck = d.Checkpoints(str(tmp_path))
    ck.save(_to_minidl(_state(1)))
    (tmp_path / "LATEST").write_text(text)
    with pytest.raises(d.DurabilityError, match="LATEST is damaged"):
        ck.load()


def test_a_checkpoint_that_cannot_be_written_is_named(tmp_path):
    (tmp_path / "checkpoint-00000001.safetensors" / "x").mkdir(parents=True)   # the rename cannot replace it
    with pytest.raises(d.DurabilityError, match=f"checkpoint 1 cannot be written to {tmp_path}: Is a directory"):
        d.Checkpoints(str(tmp_path)).save({"step": 1})
    (tmp_path / "LATEST").mkdir()
    with pytest.raises(d.DurabilityError, match=f"{tmp_path / 'LATEST'} cannot be read"):
        d.Checkpoints(str(tmp_path)).latest()


def test_a_state_that_needs_pickle_is_refused_at_save(tmp_path):
    with pytest.raises(TypeError, match="only tensors"):
        d.Checkpoints(str(tmp_path)).save({"w": np.zeros(3)})


# ----------------------------------------------------------------------------- write-ahead log
def _records(seed, k):
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8) for _ in range(int(rng.integers(0, 4)))]
            for _ in range(k)]


def _append(folder, n, records):
    log = d.Log(folder, n)
    for record in records:
        log.append(record)
    log.close()


def _assert_replays(folder, n, records):
    got = list(d.replay(folder, n))
    assert [[bytes(p) for p in r] for r in records] == got


def test_log_replays_what_was_appended(tmp_path):
    records = _records(0, 20)
    records[3] = [b"", b"x"]   # empty parts and bytes objects too
    _append(str(tmp_path), 0, records[:10])
    _append(str(tmp_path), 0, records[10:])   # reopened: appends after the first ten
    _assert_replays(str(tmp_path), 0, records)
    assert list(d.replay(str(tmp_path), 1)) == []   # no such log


def test_a_torn_tail_is_dropped_and_cut_off_at_every_cut(tmp_path):
    records = _records(1, 5)
    records[-1] = [np.arange(100, dtype=np.uint8), b"tail"]
    whole = tmp_path / "whole"
    _append(str(whole), 0, records)
    data = (whole / "wal-00000000.log").read_bytes()
    last = len(data) - (24 + 8 + 100 + 8 + 4)
    for cut in sorted({last + 1, last + 4, last + 23, last + 24, last + 25, last + 31, last + 32, last + 100,
                       len(data) - 1}):
        folder = tmp_path / f"cut{cut}"
        folder.mkdir()
        (folder / "wal-00000000.log").write_bytes(data[:cut])
        _assert_replays(str(folder), 0, records[:-1])
        assert os.path.getsize(folder / "wal-00000000.log") == last
        _append(str(folder), 0, [[b"again"]])
        _assert_replays(str(folder), 0, records[:-1] + [[b"again"]])


@pytest.mark.parametrize("at", [0, 6, 12, 20, 24, 30])   # magic, count, length, CRC, header CRC, payload
def test_a_flipped_byte_in_a_middle_record_names_file_and_offset(tmp_path, at):
    records = _records(2, 6)
    records[2] = [b"0123456789"]
    _append(str(tmp_path), 0, records)
    path = tmp_path / "wal-00000000.log"
    offset = sum(24 + sum(8 + len(p) for p in r) for r in records[:2])
    data = bytearray(path.read_bytes())
    data[offset + at] ^= 0x01
    path.write_bytes(bytes(data))
    replay = d.replay(str(tmp_path), 0)
    assert len([next(replay), next(replay)]) == 2
    with pytest.raises(d.DurabilityError, match=rf"wal-00000000\.log is corrupted: record 2 at byte {offset}"):
        next(replay)
    assert os.path.getsize(path) == len(data)   # corruption is reported, never cut off


def test_a_failed_append_is_cut_off(tmp_path, monkeypatch):
    log = d.Log(str(tmp_path), 0)
    log.append([b"first"])

    def fail(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fdatasync", fail)
    with pytest.raises(d.DurabilityError, match=r"wal-00000000\.log: a record cannot be appended: No space"):
        log.append([b"lost"])
    monkeypatch.undo()
    log.append([b"second"])
    log.close()
    _assert_replays(str(tmp_path), 0, [[b"first"], [b"second"]])


def test_start_log_deletes_older_segments(tmp_path):
    for n in (0, 1, 2, 3):
        _append(str(tmp_path), n, [[b"x"]])
    (tmp_path / "LATEST").write_text("{}")
    d.start_log(str(tmp_path), 2)
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "wal-00000002.log", "wal-00000003.log"]


# ----------------------------------------------------------------------------- check_writable
def test_check_writable_creates_the_folder(tmp_path):
    d.check_writable(str(tmp_path / "a" / "b"), "ps")
    assert os.listdir(tmp_path / "a" / "b") == []


def test_check_writable_names_a_folder_under_a_file(tmp_path):   # a failure that root meets too
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match=f"server 1: cannot write to {tmp_path / 'file' / 'ck'}: Not a directory"):
        d.check_writable(str(tmp_path / "file" / "ck"), "server 1")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0o500")
def test_check_writable_names_a_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(ValueError, match=f"server 1: cannot write to {folder}: Permission denied"):
            d.check_writable(str(folder), "server 1")
        with pytest.raises(ValueError, match=f"cannot write to {folder / 'sub'}"):
            d.check_writable(str(folder / "sub"), "server 1")
    finally:
        folder.chmod(0o700)


# ----------------------------------------------------------------------------- fault points
def _killed_child(code, fault):
    env = dict(os.environ, MINIDL_FAULT=fault, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr.decode()


def test_kill_in_the_middle_of_an_append(tmp_path):
    _killed_child(f"""
        from minidl.dist.ps.durability import Log
        other = Log({str(tmp_path / "other")!r}, 0, fault_rank=2)   # another rank: never killed
        log = Log({str(tmp_path)!r}, 0, fault_rank=1)
        for i in range(5):
            other.append([b"o"])
            log.append([bytes([i]) * 1000, b"more"])
        """, "rank=1 at=ps_wal:4 do=kill")
    assert os.path.getsize(tmp_path / "wal-00000000.log") > 3 * 1044   # the fourth record is half written
    _assert_replays(str(tmp_path), 0, [[bytes([i]) * 1000, b"more"] for i in range(3)])
    assert os.path.getsize(tmp_path / "wal-00000000.log") == 3 * 1044
    _assert_replays(str(tmp_path / "other"), 0, [[b"o"]] * 4)


def test_kill_in_the_middle_of_a_checkpoint(tmp_path):
    _killed_child(f"""
        import minidl
        from minidl.dist.ps.durability import Checkpoints
        ck = Checkpoints({str(tmp_path)!r}, fault_rank=0)
        for i in range(3):
            ck.save({{"w": minidl.full((1000,), float(i)), "step": i}})
        """, "rank=0 at=ps_checkpoint:3 do=kill")
    assert any(f.endswith(".tmp") for f in os.listdir(tmp_path))   # the torn temp file
    ck = d.Checkpoints(str(tmp_path))
    n, state = ck.load()
    assert n == 2 and state["step"] == 1
    np.testing.assert_array_equal(state["w"].numpy(), np.full(1000, 1.0, np.float32))
    assert ck.save({"step": 3}) == 3
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "checkpoint-00000003.safetensors"]   # temp file gone
