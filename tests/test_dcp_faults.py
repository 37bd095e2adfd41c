"""minidl.dist.checkpoint with ranks killed or failing on purpose (MINIDL_FAULT), as real processes of the "gloo"
backend (tests/dcp_fault_script.py): each job saves checkpoint A, then B into the same folder ("same") or a new
one ("new"), and one rank dies at a chosen point of B's save. The survivor must end with an error naming the
dead rank (never hang), and this process, alone (no_dist), must then load from the folders exactly what the
commit point says: A while B's ``.metadata`` is not in place, B once it is; a folder holding only an interrupted
B is refused as incomplete. The values are checked against numpy's (dcp_fault_script.arrays).

The points of B's save, on the rank killed (this rank's calls count from the start of the job; save A makes
the first all-gathers, files and commit):

- ``plan``: at B's plan all-gather (the 3rd all_gather_object; A's plan and results made the first two);
  no file of B is written yet (the coordinator has made the folder).
- ``write``: halfway through writing its file of B (its 2nd file): a torn file.
- ``written``: its file of B whole, at the results all-gather (the 4th all_gather_object).
- ``commit``: halfway through the coordinator's ``.metadata`` of B, before the rename: A's stays.
- ``cleanup``: after B's ``.metadata`` is renamed into place, before A's files are removed: B is committed.
"""
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from dcp_fault_script import COLS, arrays, flat, rows_of, state
from safetensors.numpy import load_file

import minidl.dist.checkpoint as dcp

SCRIPT = str(Path(__file__).with_name("dcp_fault_script.py"))
ROOT = str(Path(__file__).resolve().parents[1])
DIST_TIMEOUT = 60   # the ranks' init_process_group(timeout=)
JOB_SECONDS = 90   # a job not over by then hung

POINTS = {"plan": "all_gather_object:3", "write": "dcp_write:2", "written": "all_gather_object:4",
          "commit": "dcp_commit:2", "cleanup": "dcp_cleanup:2"}
COMMITTED = {"plan": False, "write": False, "written": False, "commit": False, "cleanup": True}
VICTIMS = {"plan": (0, 1), "write": (0, 1), "written": (0, 1), "commit": (0,), "cleanup": (0,)}   # (only
# the coordinator commits and cleans up)


class Job:
    """``size`` ranks of the script in ``MODE`` on folders under ``root``, started at once."""

    def __init__(self, root: Path, mode: str, size: int, fault: str | None):
        root.mkdir()
        self.root, self.size = root, size
        env = dict(os.environ, PYTHONPATH=ROOT, WORLD_SIZE=str(size), MINIDL_TEST_STORE=str(root / "store"))
        env.pop("MINIDL_FAULT", None)
        if fault:
            env["MINIDL_FAULT"] = fault
        self.outs = [root / f"rank{r}.out" for r in range(size)]
        self.procs, self.ended = [], [None] * size
        for r, path in enumerate(self.outs):
            with open(path, "w") as out:
                self.procs.append(subprocess.Popen([sys.executable, SCRIPT, mode, str(root)], cwd=ROOT, stdout=out,
                                                   stderr=subprocess.STDOUT, env=dict(env, RANK=str(r))))

    def poll(self) -> bool:
        """Note when each rank ended; whether all have."""
        for r, p in enumerate(self.procs):
            if self.ended[r] is None and p.poll() is not None:
                self.ended[r] = time.time()
        return None not in self.ended

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def out(self, r: int) -> str:
        return self.outs[r].read_text()

    def everything(self) -> str:
        return "\n".join(f"--- rank {r} (exit {p.poll()})\n{self.out(r)}" for r, p in enumerate(self.procs))

    def error(self, r: int) -> tuple:
        """Rank r's ERROR line: (time, type, failed ranks, message)."""
        lines = [line for line in self.out(r).splitlines() if line.startswith("ERROR ")]
        assert len(lines) == 1, self.everything()
        _, when, kind, failed, text = lines[0].split(" ", 4)
        return float(when), kind, failed, text


def run_jobs(tmp_path, specs: dict) -> dict:
    """Start every job of ``specs`` (name -> (mode, size, fault)) at once and wait for all of them to end."""
    jobs = {}
    try:
        for name, (mode, size, fault) in specs.items():
            jobs[name] = Job(tmp_path / name, mode, size, fault)
        deadline = time.monotonic() + JOB_SECONDS
        while not all([job.poll() for job in jobs.values()]):
            if time.monotonic() > deadline:
                raise AssertionError("hung:\n" + "\n".join(f"=== {name}\n{job.everything()}"
                                                             for name, job in jobs.items() if not job.poll()))
            time.sleep(0.01)
        return jobs
    finally:
        for job in jobs.values():
            job.kill()


def load_alone(folder: Path) -> dict:
    """The checkpoint in ``folder`` loaded by this process alone, into zeros: its values as ``arrays`` gives them."""
    got = state(0, 1, 1, zeros=True)
    dcp.load(got, checkpoint_id=str(folder), no_dist=True)
    return flat(got)


def assert_is(got: dict, version: int) -> None:
    want = arrays(version)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert np.array_equal(got[k], v) and np.asarray(got[k]).dtype == np.asarray(v).dtype, (k, version)


def shards(folder: Path) -> dict:
    """save id -> {rank: file} of the shard files in ``folder``."""
    found = {}
    for f in folder.iterdir():
        if f.name.startswith("__") and f.name.endswith(".safetensors"):
            rank, save_id = f.name[2:].split("_", 1)[0], f.name.split(".")[1]
            found.setdefault(save_id, {})[int(rank)] = f
    return found


def survivors_name_the_dead(job: Job, victim: int) -> None:
    """The victim died of SIGKILL; every other rank saved A, then ended at once with an error naming it."""
    assert job.procs[victim].returncode == -signal.SIGKILL, job.everything()
    for r in range(job.size):
        assert "SAVED A" in job.out(r), job.everything()
        if r == victim:
            continue
        assert job.procs[r].returncode == 3, job.everything()
        when, kind, _, text = job.error(r)
        assert f"rank {victim} died or was cut off" in text, job.everything()
        # (the victim's end is when this process saw it, polling every 10 ms: the survivor often raised first)
        print(f"rank {r} raised {kind} {when - job.ended[victim]:+.3f} s after rank {victim}'s death was seen")
        assert when - job.ended[victim] < DIST_TIMEOUT / 2, job.everything()   # its death, not a timeout


@pytest.mark.parametrize("point", list(POINTS))
def test_a_rank_killed_during_save(tmp_path, point):
    """For each victim (the coordinator, rank 0, and the other, rank 1) and each mode: the survivor names the
    dead rank; the same folder loads A before the commit and B after it; a new folder holds an interrupted B
    (refused, named incomplete) before the commit, B after it."""
    specs = {f"{mode}{victim}": (mode, 2, f"rank={victim} at={POINTS[point]} do=kill")
             for victim in VICTIMS[point] for mode in ("same", "new")}
    jobs = run_jobs(tmp_path, specs)
    committed = COMMITTED[point]
    for name, job in jobs.items():
        mode, victim = name[:-1], int(name[-1])
        survivors_name_the_dead(job, victim)
        folder_a = job.root / "A"
        if mode == "same":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert_is(load_alone(folder_a), 2 if committed else 1)
            committed_id = json.loads((folder_a / ".metadata").read_text())["body"]["save_id"]
            others = set(shards(folder_a)) - {committed_id}   # (after the commit, A's files are still there)
            assert committed_id in shards(folder_a) and len(others) == (0 if point == "plan" else 1), shards(folder_a)
            if point in ("write", "written", "commit"):   # B's files are there, and named uncommitted on load
                assert any(f"the files of save {others.pop()}" in str(w.message) and "never committed" in str(w.message)
                           for w in caught), [str(w.message) for w in caught]
            else:
                assert not caught, [str(w.message) for w in caught]
            if point == "commit":   # the torn .metadata is a temp file, never the checkpoint's
                assert [f for f in os.listdir(folder_a) if f.startswith(".minidl-")], os.listdir(folder_a)
            continue
        folder_b = job.root / "B"
        assert_is(load_alone(folder_a), 1)
        if committed:
            assert_is(load_alone(folder_b), 2)
        elif point == "plan":   # the coordinator made the folder, and nobody wrote in it
            assert list(folder_b.iterdir()) == [], list(folder_b.iterdir())
            with pytest.raises(dcp.CheckpointException, match="there is no checkpoint at .*no .metadata"):
                load_alone(folder_b)
        else:
            (save_id, files), = shards(folder_b).items()
            assert sorted(files) == [0, 1], files   # the survivor wrote its file whole before it waited
            with pytest.raises(RuntimeError, match=f"holds an incomplete checkpoint: the files of save {save_id} "
                                                   r"from rank\(s\) \[0, 1\] but no .metadata"):
                load_alone(folder_b)
            torn = point == "write"
            for r, f in files.items():   # the victim's file is torn exactly where it was killed midway
                if torn and r == victim:
                    with pytest.raises(Exception):
                        load_file(str(f))
                else:
                    lo, hi = rows_of(r, 2)
                    assert np.array_equal(load_file(str(f))[f"model.fc.weight[{lo}:{hi},0:{COLS}]"],
                                          arrays(2)["model.fc.weight"][lo:hi])


def test_a_rank_that_raises_while_writing_fails_every_rank_naming_it(tmp_path):
    """Rank 1 of 3 raises halfway through its file of B: all three raise CheckpointException naming rank 1
    (and only it) with its error; A loads whole, and B's folder, with every rank's file, is refused."""
    job = run_jobs(tmp_path, {"raise": ("new", 3, "rank=1 at=dcp_write:2 do=raise")})["raise"]
    for r in range(3):
        assert job.procs[r].returncode == 3, job.everything()
        _, kind, failed, text = job.error(r)
        assert (kind, failed) == ("CheckpointException", "[1]"), job.everything()
        assert "minidl.dist.checkpoint.save failed; failed on rank(s) [1]" in text, job.everything()
        assert "rank 1: " in text and "MINIDL_FAULT: rank 1 fails on purpose at dcp_write" in text, text
    assert_is(load_alone(job.root / "A"), 1)
    with pytest.raises(RuntimeError, match=r"incomplete checkpoint: the files of save \w+ from rank\(s\) \[0, 1, 2\]"):
        load_alone(job.root / "B")


def test_a_rank_killed_during_load_is_named_by_the_other(tmp_path):
    """Killed while loading A — the coordinator after reading .metadata, before broadcasting it (its 2nd
    broadcast_object_list; A's commit made the 1st), or rank 1 after reading its boxes, at the all-gather of
    the outcome (its 4th all_gather_object) — the other rank raises naming it; A is left as it was."""
    jobs = run_jobs(tmp_path, {"coordinator": ("load", 2, "rank=0 at=broadcast_object_list:2 do=kill"),
                               "other": ("load", 2, "rank=1 at=all_gather_object:4 do=kill")})
    for name, victim in (("coordinator", 0), ("other", 1)):
        survivors_name_the_dead(jobs[name], victim)
        assert "LOADED" not in jobs[name].out(1 - victim), jobs[name].everything()
        assert_is(load_alone(jobs[name].root / "A"), 1)
