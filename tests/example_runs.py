"""Run an example as a user does, alone or under mpiexec, and give back (exit code, its output)."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
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
