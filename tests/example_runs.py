"""Run an example as a user does, alone or under mpiexec, and give back (exit code, its output)."""
import importlib.util
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
