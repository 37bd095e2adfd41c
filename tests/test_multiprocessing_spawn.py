"""minidl.multiprocessing.spawn against torch.multiprocessing.spawn: the same jobs (tests/spawn_cases.py)
run by both, compared by exception type, attributes and message; every child a job starts has ended
when its test does. Two processes a job: each start costs about a second."""
import inspect
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import minidl
import minidl.multiprocessing
import spawn_cases

SPAWN = sys.modules["minidl.multiprocessing.spawn"]  # (the module; the package's `spawn` is the function)


def _running(pid):
    """Whether the process runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


@pytest.fixture(params=["torch", "minidl"])
def mp(request):
    if request.param == "torch":
        return pytest.importorskip("torch.multiprocessing")
    return minidl.multiprocessing


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The children's folder; error files go under tmp_path too (torch leaves the raised child's behind).
    Afterwards, every child that recorded its pid must have ended (leftovers are killed)."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    yield tmp_path
    pids = [int(p.read_text()) for p in tmp_path.glob("pid-*")]
    left = [pid for pid in pids if _running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"children still running after the job: {left}"


def _exception(mp, name):
    return getattr(sys.modules[f"{mp.__name__}.spawn"], name)


def _pid(folder, index):
    return int((folder / f"pid-{index}").read_text())


def test_success_runs_fn_with_the_index_and_args_and_returns_none(mp, folder):
    with pytest.warns(FutureWarning, match="only supports start_method=spawn"):
        assert mp.spawn(spawn_cases.succeed, args=(str(folder),), nprocs=2, start_method="fork") is None
    done = [json.loads((folder / f"done-{i}").read_text()) for i in range(2)]
    assert [d["index"] for d in done] == [0, 1]
    if mp is minidl.multiprocessing:  # the children imported the parent's minidl
        assert {d["minidl"] for d in done} == {minidl.__file__}
        assert not os.listdir(folder / "tmp")


@pytest.mark.parametrize("case, exit_code, signal_name", [
    ("raise_in_one", 1, None), ("exit_in_one", 3, None), ("killed_in_one", -signal.SIGKILL, "SIGKILL")])
def test_a_failing_child_ends_the_job_and_is_named(mp, folder, case, exit_code, signal_name):
    raised = ProcessRaised = _exception(mp, "ProcessRaisedException")
    if case != "raise_in_one":
        raised = _exception(mp, "ProcessExitedException")
    with pytest.raises(raised) as info:
        mp.spawn(getattr(spawn_cases, case), args=(str(folder),), nprocs=2)
    error = info.value
    assert isinstance(error, _exception(mp, "ProcessException")) and type(error).__name__ == raised.__name__
    assert (error.error_index, error.error_pid) == (1, _pid(folder, 1))
    assert str(error) == error.msg
    if raised is ProcessRaised:
        assert error.msg.startswith("\n\n-- Process 1 terminated with the following error:\nTraceback (most recent")
        assert "in _raise" in error.msg and error.msg.endswith("ValueError: boom from 1\n")
    else:
        assert (error.exit_code, error.signal_name) == (exit_code, signal_name)
        cause = f"signal {signal_name}" if signal_name else f"exit code {exit_code}"
        assert error.msg == f"process 1 terminated with {cause}"
    assert not _running(_pid(folder, 0))  # the sibling was ended (SIGTERM)
    if mp is minidl.multiprocessing:
        assert not os.listdir(folder / "tmp")


def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(mp, folder):
    context = mp.spawn(spawn_cases.stubborn_sibling, args=(str(folder),), nprocs=2, join=False)
    start = time.monotonic()
    with pytest.raises(_exception(mp, "ProcessRaisedException"), match="ValueError: boom from 1"):
        while not context.join(grace_period=0.5):
            pass
    assert [p.exitcode for p in context.processes] == [-signal.SIGKILL, 1]
    assert time.monotonic() - start < 30  # (not torch's 30 s default: the grace period was given)


def test_join_false_returns_the_context_to_poll(mp, folder):
    gate = folder / "gate"
    context = mp.spawn(spawn_cases.succeed, args=(str(folder), str(gate)), nprocs=2, join=False)
    assert type(context).__name__ == "ProcessContext" and isinstance(context, mp.ProcessContext)
    assert context.pids() == [p.pid for p in context.processes] and len(context.pids()) == 2
    assert context.join(timeout=0.05) is False  # (the children wait for the gate)
    gate.touch()
    deadline = time.monotonic() + 120
    while not context.join(timeout=0.5):
        assert time.monotonic() < deadline, "the children never finished"
    assert context.join() is True and [p.exitcode for p in context.processes] == [0, 0]
    assert sorted(p.name for p in folder.glob("done-*")) == ["done-0", "done-1"]


_INTERRUPTED = """
import os, signal, sys, threading, time
import minidl.multiprocessing as mp, spawn_cases
sys.modules["minidl.multiprocessing.spawn"]._INTERRUPT_TERM_WAIT = 0.3
folder, main = sys.argv[1], threading.main_thread().ident

def interrupt_once_both_run():
    deadline = time.monotonic() + 120
    while sum(n.startswith("pid-") for n in os.listdir(folder)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    signal.pthread_kill(main, signal.SIGINT)

threading.Thread(target=interrupt_once_both_run, daemon=True).start()
try:
    mp.spawn(spawn_cases.hold, args=(folder,), nprocs=2)
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def _python(code, folder, *args, **options):
    """``python -c code folder *args`` with minidl and spawn_cases importable and temporary files under
    folder/tmp; a process of its own (whatever this test process's signal state)."""
    paths = [os.path.dirname(os.path.dirname(minidl.__file__)), os.path.dirname(spawn_cases.__file__)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "TMPDIR": str(folder / "tmp")}
    return subprocess.Popen([sys.executable, "-c", code, str(folder), *args], env=env, **options)


def test_an_interrupted_join_ends_every_child(folder):
    """torch leaves this to the terminal's SIGINT reaching the children; minidl ends them itself. (In a process
    of its own: a signal's KeyboardInterrupt reaches the main thread, which here is pytest's.)"""
    parent = _python(_INTERRUPTED, folder, stdout=subprocess.PIPE, text=True)
    out, _ = parent.communicate(timeout=120)
    assert out.strip() == "interrupted" and parent.returncode == 0
    assert not os.listdir(folder / "tmp")  # (and the fixture checks that both children ended)


@pytest.mark.parametrize("ignoring", [False, True], ids=["", "parent-ignoring-sigint"])
def test_children_of_a_killed_parent_end(folder, ignoring):
    """A parent SIGKILLed cannot end its children: Linux sends each SIGINT (PR_SET_PDEATHSIG), which
    ends even the one that ignores SIGTERM — and children of a parent that ignores SIGINT (nohup) too."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    code = ("import signal, sys, minidl.multiprocessing as mp, spawn_cases\n"
            + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if ignoring else "")
            + "mp.spawn(spawn_cases.hold, (sys.argv[1],), 2)")
    parent = _python(code, folder)
    try:
        deadline = time.monotonic() + 120
        while len(list(folder.glob("pid-*"))) < 2:
            assert parent.poll() is None and time.monotonic() < deadline, "the children never started"
            time.sleep(0.02)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while any(_running(_pid(folder, i)) for i in range(2)) and time.monotonic() < deadline:
        time.sleep(0.02)


def _parameters(module, dotted):
    """Names and defaults of a function's parameters (not torch's annotations)."""
    owner, _, name = dotted.rpartition(".")
    function = getattr(getattr(module, owner) if owner else module, name)
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_api_is_torchs():
    torch_mp = pytest.importorskip("torch.multiprocessing")
    mine = minidl.multiprocessing
    for name in ("spawn", "start_processes", "ProcessContext.join", "ProcessContext.pids"):
        ours, theirs = (_parameters(module, name) for module in (mine, torch_mp))
        assert ours == theirs, name
    assert set(SPAWN.__all__) <= set(sys.modules["torch.multiprocessing.spawn"].__all__)


@pytest.mark.parametrize("name, args", [("ProcessRaisedException", ("trace", 1, 42)),
                                        ("ProcessExitedException", ("exited", 0, 7, -9, "SIGKILL"))])
def test_exceptions_pickle_with_their_attributes(mp, name, args):
    error = pickle.loads(pickle.dumps(_exception(mp, name)(*args)))
    attributes = ("msg", "error_index", "error_pid", "exit_code", "signal_name")
    assert type(error).__name__ == name and tuple(getattr(error, a) for a in attributes[:len(args)]) == args


def test_bad_arguments_are_named():
    spawn = minidl.multiprocessing.spawn
    with pytest.raises(TypeError, match="fn must be a callable"):
        spawn("main")
    with pytest.raises(TypeError, match="args must be a tuple .* got int"):
        spawn(spawn_cases.succeed, args=5)
    with pytest.raises(ValueError, match="nprocs must be a positive number of processes, got 0"):
        spawn(spawn_cases.succeed, nprocs=0)
    with pytest.raises(ValueError, match="cannot find context for 'threads'"):
        minidl.multiprocessing.start_processes(spawn_cases.succeed, start_method="threads")
