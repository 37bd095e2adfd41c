"""Run an example as a user does, alone or under mpiexec, and give back (exit code, its output)."""
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_example(script, *args, cwd, ranks=None, timeout=300):
    """(exit code, stdout and stderr together) of examples/<script> with this checkout's minidl;
    under ``mpiexec -n ranks`` when ``ranks`` is given (skipped where there is no MPI)."""
    command = [sys.executable, str(ROOT / "examples" / script), *args]
    if ranks is not None:
        from minidl.dist.launch import find_mpiexec
        mpiexec = find_mpiexec()
        if mpiexec is None or importlib.util.find_spec("mpi4py") is None:
            pytest.skip("mpiexec or mpi4py not found")
        command = [mpiexec, "-n", str(ranks)] + command
    proc = subprocess.Popen(command, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{script} hung: {proc.communicate()[0]}")
    return proc.returncode, out


_IN_TURN = """
import contextlib, io, json, os, runpy, sys, traceback
results = []
environ = dict(os.environ)
for path, args in json.loads(sys.argv[1]):
    sys.argv, out, code = [path, *args], io.StringIO(), 0
    sys.path[0] = os.path.dirname(path)   # (where `python path` puts it, in place of python -c's cwd)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            runpy.run_path(path, run_name="__main__")
        except SystemExit as e:   # (as the interpreter exits: sys.exit("text") prints it and gives 1)
            if isinstance(e.code, int) or e.code is None:
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
    os.environ.clear()
    os.environ.update(environ)
    results.append((code or 0, out.getvalue()))
print(json.dumps(results))
"""


def run_in_turn(calls, *, cwd, env=None):
    """{(script path, args): (exit code, stdout and stderr together)} of each script run as
    `python script args` runs it, one after another in one Python process (its folder first on
    sys.path, the environment restored after each): for --help, argument errors and other runs that
    stop early, where starting Python would be most of the cost. Modules a script imported stay
    imported for the next. ``calls`` is [(script path, args tuple)]."""
    payload = json.dumps([(str(script), list(args)) for script, args in calls])
    done = subprocess.run([sys.executable, "-c", _IN_TURN, payload], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {(str(script), tuple(args)): tuple(result) for (script, args), result in zip(calls, results)}


def run_example_as_ranks(script, *args, cwd, ranks, timeout=300, env=None):
    """[(exit code, output)] per rank of examples/<script> started as torch's launchers start ranks: one
    process each with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a free port), so over minidl's gloo
    transport, without MPI. Every process is killed at the end, whatever happened."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs, outs = [], []
    try:
        for r in range(ranks):
            outs.append(open(Path(cwd) / f"{Path(script).stem}-rank{r}.out", "w+"))
            procs.append(subprocess.Popen(
                [sys.executable, str(ROOT / "examples" / script), *args], cwd=cwd, stdout=outs[-1],
                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(ROOT), "RANK": str(r), "WORLD_SIZE": str(ranks),
                     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **(env or {})}))
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{script} hung: " + "\n".join(f"--- rank {r}\n{o.seek(0) or o.read()}"
                                                           for r, o in enumerate(outs)))
        return [(p.returncode, o.seek(0) or o.read()) for p, o in zip(procs, outs)]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for o in outs:
            o.close()
