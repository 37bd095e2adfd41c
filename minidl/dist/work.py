"""Work handles (what async_op=True returns) and the communication thread that runs a process
group's collectives one after another, in the order they were issued — the same order on
every rank. Waiting on a collective only waits for a thread event; the thread itself polls
the messages with back-off (see communicators.base.wait_all), so compute on other threads goes on.
A blocking call made while the thread has nothing to do runs on the caller's thread instead
(the same order, without two thread wake-ups per call).
"""
from __future__ import annotations

import ctypes
import queue
import sys
import threading
import time

PR_SET_TIMERSLACK = 29  # linux/prctl.h
SLACK_NS = 1000


class Work:
    """A pending operation: ``wait()`` blocks until it finished (re-raising its error),
    ``is_completed()`` says whether it has."""

    def wait(self, timeout=None) -> bool:
        raise NotImplementedError

    def is_completed(self) -> bool:
        raise NotImplementedError

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self):
        return None


class _Job(Work):
    """``finished_at``: time.perf_counter() when the job ended (for timelines)."""

    def __init__(self, fn):
        self.fn, self.error, self.done, self.finished_at = fn, None, threading.Event(), None

    def run(self, finished):
        try:
            self.fn()
        except BaseException as e:  # handed to whoever waits
            self.error = e
        finally:
            self.finished_at = time.perf_counter()
            finished()
            self.done.set()

    def wait(self, timeout=None):
        if not self.done.wait(None if timeout is None else _seconds(timeout)):
            raise TimeoutError("Work.wait: the operation did not finish within the given timeout")
        if self.error is not None:
            raise self.error
        return True

    def is_completed(self):
        return self.done.is_set()

    def exception(self):
        return self.error


def _seconds(timeout):
    return timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout)


class CommThread:
    """A daemon thread running submitted jobs in order; started at the first queued job.
    ``precise_sleeps``: see _precise_sleeps (for ranks that have a core each)."""

    def __init__(self, name: str, precise_sleeps: bool = False):
        self.name, self.jobs, self.thread = name, queue.SimpleQueue(), None
        self.precise_sleeps = precise_sleeps
        self.lock = threading.Lock()     # guards ``pending``
        self.running = threading.Lock()  # held by whichever thread runs a job
        self.pending = 0                 # jobs queued and not finished

    def run(self, fn) -> None:
        """Run ``fn(inline)`` and return once it is done (re-raising its error): right here
        (inline=True) when no job is queued or running — no Work, no thread wake-up — else
        queued behind them (inline=False). ``pending`` only counts queued jobs: it drops to 0
        once the last one finished, and ``running`` keeps an inline run from overlapping it
        (or a job queued from another thread meanwhile)."""
        if self.pending:
            self.submit(fn).wait()
            return
        self.running.acquire()  # not ``with``: ~50 ns more, on every small blocking collective
        try:
            fn(True)
        finally:
            self.running.release()

    def submit(self, fn) -> Work:
        """Queue ``fn(False)`` for the thread; the Work says when it is done."""
        with self.lock:
            self.pending += 1
        job = _Job(lambda: fn(False))
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self.thread.start()
        self.jobs.put(job)
        return job

    def _finished(self):
        with self.lock:
            self.pending -= 1

    def _loop(self):
        if self.precise_sleeps:
            _precise_sleeps()
        while (job := self.jobs.get()) is not None:
            with self.running:
                job.run(self._finished)
            del job   # (not held while waiting for the next: it keeps its collective's buffers alive)

    def close(self) -> None:
        if self.thread is not None:
            self.jobs.put(None)
            self.thread.join()
            self.thread = None


def _precise_sleeps() -> None:
    """Let this thread's sleeps end within ~1 us of when they were asked to (Linux wakes a thread
    up to 50 us late by default, its "timer slack"). The communication thread's waits sleep
    between polls, and MPICH moves a message only inside a poll: every message of a pipelined
    collective would otherwise cost an oversleep with its transfer stalled (benchmarks/README.md,
    "All-reduce"). Only where every rank has a core: with more ranks than cores the extra wake-ups
    take the core from the rank being waited for. Elsewhere than Linux: the default."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None).prctl
    except (OSError, AttributeError):  # no C library to ask
        return
    prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
    prctl(PR_SET_TIMERSLACK, SLACK_NS, 0, 0, 0)


class RequestWork(Work):
    """Point-to-point requests posted at once (isend/irecv); ``finish`` runs once they completed."""

    def __init__(self, channel, requests, finish=lambda: None):
        self.channel, self.requests, self.finish, self.finished = channel, requests, finish, False

    def _finish(self):
        if not self.finished:
            self.finished = True
            self.finish()

    def wait(self, timeout=None):
        self.channel.wait(self.requests)
        self._finish()
        return True

    def is_completed(self):
        self.requests = [r for r in self.requests if not r.test()]
        if not self.requests:
            self._finish()
        return not self.requests


class Future:
    """What a DDP communication hook returns (torch.futures.Future-like): ``wait()`` waits for
    the work, then returns ``value_fn()``; ``then(fn)`` chains ``fn(future)`` after it."""

    def __init__(self, work, value_fn):
        self.work, self.value_fn, self._done, self._value = work, value_fn, False, None

    @property
    def finished_at(self):
        return getattr(self.work, "finished_at", None)

    def wait(self):
        if not self._done:
            self.work.wait()
            self._value, self._done = self.value_fn(), True
        return self._value

    def value(self):
        if not self._done:
            raise RuntimeError("Future.value: the future has not completed; call wait() first")
        return self._value

    def is_completed(self) -> bool:
        return self._done or self.work.is_completed()

    done = is_completed

    def then(self, fn) -> "Future":
        return Future(self, lambda: fn(self))
