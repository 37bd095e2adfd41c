"""One attempt's workers: started in process groups of their own (so stopping one ends whatever it started),
watched, stopped (SIGTERM, then SIGKILL after a grace period), and described when they fail."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

GRACE_SECONDS = 5.0
TRACEBACK_LINES = 20   # of a failed worker's traceback, in the launcher's summary


class ChildFailedError(Exception):
    """The job failed: a worker failed and no restart was left (torch's name); the message is the summary."""


def restart_or_fail(failures, restarts: int, max_restarts: int) -> int:
    """After workers failed: the next restart count while ``max_restarts`` allows (saying so on stderr), else the
    summary on stderr and ChildFailedError. A signal-killed worker is named first (it is the likeliest cause)."""
    failures.sort(key=lambda f: (f.exitcode >= 0, f.record() is None, f.seen))
    if restarts < max_restarts:
        sys.stderr.write(f"minidl.dist.run: {failures[0].describe().splitlines()[0]}; restarting the group "
                         f"(restart {restarts + 1} of {max_restarts})\n")
        return restarts + 1
    summary = "\n".join([f"minidl.dist.run: the job failed (restarts used: {restarts} of {max_restarts})"]
                        + [f.describe() for f in failures])
    sys.stderr.write(summary + "\n")
    raise ChildFailedError(summary)


@dataclass
class Failure:
    local_rank: int
    rank: int
    exitcode: int        # negative: killed by that signal
    error_file: str
    seen: float          # when the launcher saw it end

    def describe(self) -> str:
        how = (f"was killed by signal {signal.Signals(-self.exitcode).name}" if self.exitcode < 0
               else f"exited with code {self.exitcode}")
        head = f"local_rank {self.local_rank} (rank {self.rank}) {how}"
        record = self.record()
        if record is None:
            return head + " (no traceback: see its output)"
        lines = record["message"]["extraInfo"]["py_callstack"].rstrip().splitlines()
        shown = lines[:TRACEBACK_LINES] + ([f"  ... {len(lines) - TRACEBACK_LINES} more lines in {self.error_file}"]
                                           if len(lines) > TRACEBACK_LINES else [])
        return "\n".join([head + f": {record['message']['message']}"] + ["  | " + line for line in shown])

    def record(self):
        try:
            with open(self.error_file) as f:
                return json.load(f)
        except (OSError, ValueError, KeyError):
            return None


class WorkerGroup:
    """``nproc`` workers of one attempt; ``envs[i]`` is local rank i's environment, ``logs`` its log folder."""

    def __init__(self, cmd, envs, logs, redirects, tee):
        self.procs, self.pumps, self.files = [], [], []
        self.envs = envs
        for i, env in enumerate(envs):
            os.makedirs(logs[i], exist_ok=True)
            out = self._stream(i, 1, logs[i], "stdout.log", redirects, tee, sys.stdout)
            err = self._stream(i, 2, logs[i], "stderr.log", redirects, tee, sys.stderr)
            proc = subprocess.Popen(cmd, env=env, stdout=out[0], stderr=err[0], start_new_session=True)
            self.procs.append(proc)
            for target, pipe_of in ((out, proc.stdout), (err, proc.stderr)):
                if target[1] is not None:   # tee: copy the pipe to the file and the console
                    t = threading.Thread(target=_pump, args=(pipe_of, target[1], target[2]), daemon=True)
                    t.start()
                    self.pumps.append(t)

    def _stream(self, i, which, folder, name, redirects, tee, console):
        """(Popen's argument, tee file or None, console) for local rank i's stdout (1) or stderr (2)."""
        if tee.get(i, 0) & which:
            f = open(os.path.join(folder, name), "wb")
            self.files.append(f)
            return subprocess.PIPE, f, console
        if redirects.get(i, 0) & which:
            f = open(os.path.join(folder, name), "wb")
            self.files.append(f)
            return f, None, None
        return None, None, None

    def failures(self) -> list:
        """The workers that ended with an error so far."""
        now = time.monotonic()
        return [Failure(i, int(self.envs[i]["RANK"]), p.returncode, self.envs[i]["TORCHELASTIC_ERROR_FILE"], now)
                for i, p in enumerate(self.procs) if p.poll() not in (None, 0)]

    def done(self) -> bool:
        return all(p.poll() == 0 for p in self.procs)

    def ended(self) -> bool:
        return all(p.poll() is not None for p in self.procs)

    def succeeded(self) -> bool:
        """Whether any worker ended well (an elastic job's survivors finish it)."""
        return any(p.poll() == 0 for p in self.procs)

    def end(self, p) -> None:
        """SIGKILL one worker (an elastic round left it out: it froze) and reap it."""
        _signal_group(p, signal.SIGKILL)
        p.wait()

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """SIGTERM every worker's process group, SIGKILL what is left after ``grace`` seconds, and reap."""
        for p in self.procs:
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            _signal_group(p, signal.SIGKILL)   # (also whatever the worker started, even after it ended)
            p.wait()
        for t in self.pumps:
            t.join(timeout=1)
        for f in self.files:
            f.close()


def _signal_group(p, sig) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(pipe, f, console) -> None:
    out = console.buffer if hasattr(console, "buffer") else None
    for chunk in iter(lambda: pipe.read1(65536), b""):
        f.write(chunk)
        f.flush()
        if out is not None:
            out.write(chunk)
            out.flush()
