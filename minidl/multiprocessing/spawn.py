"""Start ``nprocs`` processes that run ``fn(index, *args)`` and wait for them as one job (torch's ``spawn``).

A job fails as a whole: the first child found to have exited non-zero ends the others (a grace period
to end by themselves if asked, SIGTERM, then SIGKILL for one that outlives it) and its cause is raised
in the parent: the child's traceback when it raised, its exit code or signal otherwise. Each child
writes its traceback to a file of its own rather than to a queue, a one-shot message that cannot block
a dying child. No child outlives the job: a parent interrupted while it starts or joins them ends them
before it lets go, and on Linux a child gets SIGINT when its parent dies.
"""
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
import traceback
import warnings

__all__ = ["ProcessContext", "ProcessException", "ProcessExitedException", "ProcessRaisedException", "spawn",
           "start_processes"]

_log = logging.getLogger(__name__)
# seconds a SIGTERMed child has before SIGKILL when join() is given no grace period (torch's figure)
_TERM_WAIT = 30.0
# the same when the parent was interrupted: someone is waiting at the keyboard
_INTERRUPT_TERM_WAIT = 3.0


class ProcessException(Exception):
    """A child of a spawned job failed: which one, by index and pid."""

    def __init__(self, msg, error_index, error_pid):
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid

    def __reduce__(self):  # (pickled with its attributes, as torch's)
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """The child's ``fn`` raised; the message holds the child's traceback."""


class ProcessExitedException(ProcessException):
    """The child exited with a non-zero code (``exit_code``) or was killed by a signal (``signal_name``)."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)


def _die_with_parent():
    """Ask Linux to send this process SIGINT when its parent dies, so a killed parent leaves no child; SIGINT is
    made to end it even where the parent ignored or blocked it (a child inherits both: started under nohup, or by
    a daemon)."""
    if sys.platform.startswith("linux"):
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
        ctypes.CDLL(None).prctl(1, signal.SIGINT)  # 1: PR_SET_PDEATHSIG


def _run(fn, index, args, error_file):
    """A child's body: ``fn(index, *args)``, an exception's traceback written to ``error_file`` for the parent."""
    _die_with_parent()
    try:
        fn(index, *args)
    except KeyboardInterrupt:
        pass  # SIGINT: the job is being ended (or the parent died); a quiet exit
    except Exception:
        with open(error_file, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(traceback.format_exc())
        if sys.excepthook is not sys.__excepthook__:   # (a library's hook: minidl.dist's tells the other ranks)
            sys.excepthook(*sys.exc_info())
        sys.exit(1)


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"<Unknown signal {number}>"


class ProcessContext:
    """The children of one job: ``join`` them (or poll with a timeout) and read their ``pids``."""

    def __init__(self, processes, error_files):
        self.processes = processes
        self.error_files = error_files
        self.sentinels = {process.sentinel: index for index, process in enumerate(processes)}

    def pids(self):
        return [int(process.pid) for process in self.processes]

    def join(self, timeout=None, grace_period=None):
        """Wait up to ``timeout`` seconds (None: until one exits) and say whether all exited with 0.

        When a child failed, the others get ``grace_period`` seconds to end by themselves (none if
        None), then SIGTERM, then SIGKILL after another grace period (30 s if None), and the failure
        is raised as a ProcessException.
        """
        if not self.sentinels:
            return True
        try:
            failed = self._first_failure(timeout)
        except BaseException:  # (an interrupt while waiting)
            self._abandon()
            raise
        if failed is None:
            if self.sentinels:
                return False
            self._discard_error_files()
            return True
        try:
            self._end(grace_period, _TERM_WAIT if grace_period is None else grace_period)
            raise self._failure(failed)
        finally:
            self._discard_error_files()

    def _first_failure(self, timeout):
        """The index of a child found to have exited non-zero within ``timeout``, else None."""
        for sentinel in multiprocessing.connection.wait(list(self.sentinels), timeout=timeout):
            index = self.sentinels.pop(sentinel)
            self.processes[index].join()
            if self.processes[index].exitcode != 0:
                return index
        return None

    def _join_all(self, seconds):
        deadline = time.monotonic() + seconds
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))

    def _end(self, grace_period, term_wait):
        """Stop every child still running: a grace period to end by itself, SIGTERM, then SIGKILL."""
        try:
            if grace_period is not None:
                self._join_all(grace_period)
            for process in self.processes:
                if process.is_alive():
                    _log.warning("Terminating process %s via signal SIGTERM", process.pid)
                    process.terminate()
            self._join_all(term_wait)
        finally:  # (also when a second interrupt cuts the wait short)
            for process in self.processes:
                if process.is_alive():
                    _log.warning("Process %s outlived SIGTERM: killing it via signal SIGKILL", process.pid)
                    process.kill()
                process.join()
            self.sentinels.clear()

    def _abandon(self):
        """End the job at once, the parent having been interrupted: no child may outlive it."""
        try:
            self._end(None, _INTERRUPT_TERM_WAIT)
        finally:
            self._discard_error_files()

    def _failure(self, index):
        process = self.processes[index]
        try:
            with open(self.error_files[index], encoding="utf-8") as f:
                trace = f.read()
        except FileNotFoundError:
            trace = ""
        if trace:
            return ProcessRaisedException(f"\n\n-- Process {index:d} terminated with the following error:\n{trace}",
                                          index, process.pid)
        code = process.exitcode
        if code < 0:
            name = _signal_name(-code)
            return ProcessExitedException(f"process {index:d} terminated with signal {name}", index, process.pid,
                                          exit_code=code, signal_name=name)
        return ProcessExitedException(f"process {index:d} terminated with exit code {code:d}", index, process.pid,
                                      exit_code=code)

    def _discard_error_files(self):
        for path in self.error_files:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _check(fn, args, nprocs):
    if not callable(fn):
        raise TypeError(f"fn must be a callable run as fn(index, *args), got {type(fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of fn's arguments after the process index, got {type(args).__name__}")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f"nprocs must be a positive number of processes, got {nprocs!r}")


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Run ``fn(index, *args)`` in ``nprocs`` processes started by ``start_method`` ("spawn", "fork",
    "forkserver"); join them (and return None), or return their ProcessContext when ``join`` is False."""
    _check(fn, args, nprocs)
    context = multiprocessing.get_context(start_method)
    processes, error_files = [], []
    try:
        for index in range(nprocs):
            fd, error_file = tempfile.mkstemp(prefix="minidl-spawn-", suffix=".traceback")
            os.close(fd)
            error_files.append(error_file)
            process = context.Process(target=_run, args=(fn, index, tuple(args), error_file), daemon=daemon)
            process.start()
            processes.append(process)
    except BaseException:  # (a child that cannot start, or an interrupt): the started ones must not stay
        ProcessContext(processes, error_files)._abandon()
        raise
    job = ProcessContext(processes, error_files)
    if not join:
        return job
    try:
        while not job.join():
            pass
    except KeyboardInterrupt:  # (one arriving between two joins; join ends the children for one inside it)
        job._abandon()
        raise


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``start_processes`` by the "spawn" method (the one safe with threads and CUDA), as torch's ``spawn``;
    ``fn`` must be importable by the children: a module-level function."""
    if start_method != "spawn":
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      "To use a different start_method use:\n\t\t minidl.multiprocessing.start_processes(...)",
                      FutureWarning, stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
