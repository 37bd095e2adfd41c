"""Starting tests/ps_fault_script.py as a job of real processes and reading what it left: shared by
tests/test_ps_faults.py and tests/ps_fault_cases_slow.py."""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("ps_fault_script.py"))
ROOT = str(Path(__file__).resolve().parents[1])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """``workers`` + ``servers`` processes of the script; every one is killed when the ``with`` ends."""

    def __init__(self, tmp_path, workers, servers, args=(), env=None):
        self.size, self.servers = workers + servers, servers
        self.paths = [tmp_path / f"rank{r}.out" for r in range(self.size)]
        base = dict(os.environ, PYTHONPATH=ROOT, WORLD_SIZE=str(self.size), MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(free_port()), **(env or {}))
        self.procs = []
        try:
            for r, path in enumerate(self.paths):
                with open(path, "w") as out:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, SCRIPT, f"servers={servers}", *args], cwd=ROOT, stdout=out,
                        stderr=subprocess.STDOUT, env=dict(base, RANK=str(r))))
        except BaseException:
            self.__exit__()
            raise

    def restart_server(self, k, checkpoint_dir, env=None):
        """Start ``python -m minidl.dist.ps --resume checkpoint_dir --server k`` (it becomes ``procs[-1]``,
        its output ``out(len(procs) - 1)``)."""
        path = self.paths[0].with_name(f"restarted{k}-{len(self.procs)}.out")
        with open(path, "w") as out:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "minidl.dist.ps", "--resume", str(checkpoint_dir), "--server", str(k)],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=ROOT, **(env or {}))))
        self.paths.append(path)
        return self.procs[-1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()

    def out(self, r):
        return self.paths[r].read_text()

    def everything(self):
        return "\n".join(f"--- rank {r} (exit {p.poll()})\n{self.out(r)}" for r, p in enumerate(self.procs))

    def until(self, what, condition, timeout=60):
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"waited {timeout} s for {what}:\n{self.everything()}"
            time.sleep(0.02)

    def finish(self, victim=None, timeout=60):
        """Wait for every rank but ``victim`` to end; their exit codes by rank."""
        self.until("the job to end", lambda: all(p.poll() is not None for r, p in enumerate(self.procs)
                                                 if r != victim), timeout)
        return [p.poll() for p in self.procs]

    def stopped(self, r):
        return Path(f"/proc/{self.procs[r].pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"

    def result(self):
        lines = [line for line in self.out(0).splitlines() if line.startswith("RESULT ")]
        assert lines, self.everything()
        return json.loads(lines[-1][len("RESULT "):])

    def last_step(self, r):
        """When rank r began its last push (a fault at that push fires right after)."""
        return float([line for line in self.out(r).splitlines() if line.startswith("STEP ")][-1].split()[2])


def check_ledger(result, servers, sent):
    """Every applied push whole and none twice: each server's part of row w is one value, the same on
    every server, equal to w's applied pushes and at most what w sent (``sent[w]``); the last row is 0."""
    shards, by = result["shards"], {int(w): n for w, n in result["stats"]["pushes_by"].items()}
    for w, row in enumerate(shards):
        assert all(lo == hi for lo, hi in row), f"row {w} uneven within a shard (a push applied in part): {row}"
        values = {lo for lo, _ in row}
        assert len(values) == 1, f"row {w}: its shards applied different pushes: {row}"
        applied = values.pop()
        if w == len(shards) - 1:
            assert applied == 0, f"the row nobody pushes changed: {row}"
            continue
        assert applied * servers == by.get(w, 0), (w, row, by)
        assert applied <= sent[w], f"worker {w}: {applied} applied of {sent[w]} sent (one applied twice)"
    return [row[0][0] for row in shards[:-1]]
