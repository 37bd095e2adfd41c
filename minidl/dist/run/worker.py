"""What each worker process runs first (by path, so it imports nothing heavy): the training script or module
as ``python`` would, with an uncaught exception's traceback written to ``TORCHELASTIC_ERROR_FILE`` for the
launcher's summary. Kept outside the user's script so that scripts need no decorator (torch's ``@record``).
It first asks Linux to SIGKILL this worker when its launcher dies: a launcher killed by SIGKILL cannot stop its
workers, and they must not live on holding ports and cores (or hang their peers)."""
import ctypes
import json
import os
import runpy
import signal
import sys
import time
import traceback

PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    """PR_SET_PDEATHSIG on Linux; exit at once when the launcher is already gone (it died before prctl)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    launcher = os.environ.get("MINIDL_RUN_LAUNCHER_PID")
    if launcher and os.getppid() != int(launcher):
        os._exit(128 + signal.SIGKILL)


def write_error_file(kind, value, tb) -> None:
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    message = "".join(traceback.format_exception_only(kind, value)).strip()
    record = {"message": {"message": message, "extraInfo": {
        "py_callstack": "".join(traceback.format_exception(kind, value, tb)), "timestamp": str(int(time.time()))}}}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f)


def _ours(filename: str) -> bool:
    return filename == __file__ or "runpy" in filename


def main(argv) -> None:
    die_with_launcher()
    as_module, target, args = argv[0] == "-m", argv[1], argv[2:]
    sys.argv = [target] + args
    sys.path[0] = os.getcwd() if as_module else os.path.dirname(os.path.abspath(target))
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit:
        raise
    except BaseException:
        kind, value, tb = sys.exc_info()
        while tb is not None and _ours(tb.tb_frame.f_code.co_filename):   # (the script's frames only)
            tb = tb.tb_next
        write_error_file(kind, value, tb)
        sys.excepthook(kind, value, tb)   # (minidl.dist's hook, once a group is up, tells the peers)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
