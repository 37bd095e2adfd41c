"""Child bodies for tests/test_multiprocessing_spawn.py, run as fn(index, *args) in spawned processes.

A module of its own that imports nothing heavy, so a child starts by importing only what its spawner
needs. Every body first records its pid in the test's folder (so the test can check that it ended),
and a failing child waits for its sibling to be running first, so the sibling is always ended by
the job rather than never started.
"""
import json
import os
import signal
import sys
import time

_PATIENCE = 60.0  # seconds a child waits for a file before it gives up (a generous bound, never reached)


def _record(index, folder):
    with open(os.path.join(folder, f"pid-{index}"), "w") as f:
        f.write(str(os.getpid()))


def _wait_for(path):
    deadline = time.monotonic() + _PATIENCE
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)


def succeed(index, folder, gate=None):
    """Wait for the gate file (if any), then write what it ran with and which minidl it imported."""
    _record(index, folder)
    if gate is not None:
        _wait_for(gate)
    minidl = sys.modules.get("minidl")
    with open(os.path.join(folder, f"done-{index}"), "w") as f:
        json.dump({"index": index, "minidl": getattr(minidl, "__file__", None)}, f)


def _sibling_fails(index, folder, failure):
    """Child 1 fails by ``failure()`` once child 0 runs; child 0 sleeps until the job ends it."""
    _record(index, folder)
    if index == 0:
        time.sleep(_PATIENCE)
    else:
        _wait_for(os.path.join(folder, "pid-0"))
        failure()


def _raise():
    raise ValueError("boom from 1")


def raise_in_one(index, folder):
    _sibling_fails(index, folder, _raise)


def exit_in_one(index, folder):
    _sibling_fails(index, folder, lambda: os._exit(3))


def killed_in_one(index, folder):
    _sibling_fails(index, folder, lambda: os.kill(os.getpid(), signal.SIGKILL))


def stubborn_sibling(index, folder):
    """Child 0 ignores SIGTERM (then says so); child 1 raises once child 0 does."""
    if index == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _record(index, folder)
    if index == 0:
        with open(os.path.join(folder, "ignoring"), "w"):
            pass
        time.sleep(_PATIENCE)
    else:
        _wait_for(os.path.join(folder, "ignoring"))
        _raise()


def hold(index, folder):
    """Child 0 ignores SIGTERM; both say they run and sleep (the parent is interrupted meanwhile)."""
    if index == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _record(index, folder)
    time.sleep(_PATIENCE)
