"""Fault injection for the tests of failure handling: one process of a job kills, stops or breaks
itself at a chosen point, driven by the environment so the code under test runs unchanged.

``MINIDL_FAULT="rank=1 at=all_reduce:3 do=kill"`` -- space-separated ``name=value`` fields:

- ``rank``: the global rank that misbehaves (the others only count), or several: ``rank=0,1``. In an elastic
  job (minidl.dist.elastic) ranks change when the group is rebuilt: the survivor that takes a dead rank's number
  counts on from its own calls and may fire the same fault; choose a point it cannot reach twice.
- ``at``: when. ``<collective>:<n>``: at the start of this rank's n-th call (from 1) of that
  collective (the name ProcessGroup.submit is given: all_reduce, broadcast, barrier ...);
  ``send``: in the middle of this rank's first message of at least 64 KiB on the socket backend
  (half of it written); ``idle:<seconds>``: that many seconds after the communicator started,
  whatever the rank is doing.
  ``ps_wal:<n>``: in the middle of this rank's n-th write-ahead log record (``minidl.dist.ps.durability``:
  half of the record written and flushed to the file); ``ps_checkpoint:<n>``: in the middle of its n-th
  checkpoint (half of the temp file written, before the rename); ``ps_apply:<n>``: right after a parameter
  server's n-th optimizer step, before it is answered. ``dcp_write:<n>``: in the middle of this rank's n-th file
  of a distributed checkpoint (``minidl.dist.checkpoint``); ``dcp_commit:<n>``: in the middle of the coordinator's
  n-th ``.metadata`` (the commit), before the rename; ``dcp_cleanup:<n>``: after its n-th commit, before the
  files of older saves are removed. ``elastic_ready:<n>``: right after this rank (its rank in the new round)
  said, for the n-th time, that it is ready to start a rebuilt group (``minidl.dist.elastic``). These take
  ``kill``, ``stop`` or ``raise``.
- ``do``: what. ``kill`` (SIGKILL itself), ``stop`` (SIGSTOP itself: a frozen rank), ``raise``
  (raise InjectedFault at a collective; from ``idle``, a KeyboardInterrupt in the main thread; not
  meant for ``send``, which runs on a sending thread), ``partition`` (close the socket backend's
  connection to rank ``peer``, default the next rank, without a goodbye).
- ``peer``: for ``partition``.
- ``restart``: only in this attempt of a launched job (``TORCHELASTIC_RESTART_COUNT``, 0 for the first), so
  a job that ``minidl.dist.run`` restarts does not fail again the same way.
"""
from __future__ import annotations

import _thread
import os
import signal
import threading
import weakref

SEND_BYTES = 64 * 1024   # a "send" fault waits for a message at least this long (one written in pieces)
_ACTIONS = ("kill", "stop", "raise", "partition")


class InjectedFault(RuntimeError):
    """Raised where MINIDL_FAULT says ``do=raise``."""


class Fault:
    def __init__(self, text: str):
        fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
        bad = [p for p in text.split() if "=" not in p] + sorted(set(fields) - {"rank", "at", "do", "peer", "restart"})
        if "rank" in fields and not all(r.strip().isdigit() for r in fields["rank"].split(",")):
            bad.append(f"rank={fields['rank']}")
        if bad or not {"rank", "at", "do"} <= set(fields):
            raise ValueError(f"MINIDL_FAULT={text!r}: expected 'rank=R[,R...] at=WHEN do=WHAT [peer=P] [restart=N]' "
                             f"(see minidl.dist.faults); bad or missing: {bad or sorted({'rank', 'at', 'do'} - set(fields))}")
        if fields["do"] not in _ACTIONS:
            raise ValueError(f"MINIDL_FAULT={text!r}: do must be one of {_ACTIONS}, got {fields['do']!r}")
        self.ranks, self.do = {int(r) for r in fields["rank"].split(",")}, fields["do"]
        self.peer = int(fields["peer"]) if "peer" in fields else None
        self.restart = int(fields["restart"]) if "restart" in fields else None
        where, _, count = fields["at"].partition(":")
        if where != "send" and not count:
            raise ValueError(f"MINIDL_FAULT={text!r}: at must be NAME:N, send or idle:SECONDS")
        self.where, self.count = where, float(count) if where == "idle" else int(count or 1)
        self.calls = 0
        self.done = False


_plan = {}   # the environment's text -> its Fault (parsed once)
_partitioners = []   # weak methods (rank, peer) -> None of socket communicators' meshes (not kept alive here)


def current():
    text = os.environ.get("MINIDL_FAULT", "").strip()
    if not text:
        return None
    if text not in _plan:
        _plan[text] = Fault(text)
    fault = _plan[text]
    if fault.restart is not None and fault.restart != int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return None
    return fault


def on_partition(fn) -> None:
    """A socket communicator's way to cut a connection: ``fn(rank, peer)``, a bound method held weakly."""
    _partitioners[:] = [ref for ref in _partitioners if ref() is not None]
    _partitioners.append(weakref.WeakMethod(fn))


def fire(fault: Fault, rank: int, size: int) -> None:
    fault.done = True
    if fault.do == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.do == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault.do == "partition":
        peer = (rank + 1) % size if fault.peer is None else fault.peer
        for ref in _partitioners:
            fn = ref()
            if fn is not None:
                fn(rank, peer)
    else:
        raise InjectedFault(f"MINIDL_FAULT: rank {rank} fails on purpose at {fault.where}")


def armed(what: str, rank: int) -> Fault | None:
    """Count this rank's call at point ``what`` (``<what>:<n>`` faults); the fault when this call is its n-th,
    for the caller to fire at once or in the middle of its work, else None."""
    fault = current()
    if fault is None or fault.done or rank not in fault.ranks or fault.where != what:
        return None
    fault.calls += 1
    return fault if fault.calls == fault.count else None


def midway(what: str, rank: int | None):
    """The hook that fires this rank's ``<what>:<n>`` fault in the middle of a write (half of it written
    and flushed), when this write is the n-th; None otherwise (and where there is no rank to match)."""
    fault = armed(what, rank) if rank is not None else None
    return None if fault is None else lambda: fire(fault, rank, 1)


def collective(what: str, rank: int, size: int) -> None:
    """Hook at the start of a collective (ProcessGroup.submit)."""
    fault = armed(what, rank)
    if fault is not None:
        fire(fault, rank, size)


def wants_send(rank: int, nbytes: int) -> bool:
    """Whether this message should be cut in the middle (the caller writes half, then calls fire)."""
    fault = current()
    return (fault is not None and not fault.done and rank in fault.ranks and fault.where == "send"
            and nbytes >= SEND_BYTES)


def start_idle(rank: int, size: int) -> None:
    """Arm an ``idle:<seconds>`` fault (when a communicator starts)."""
    fault = current()
    if fault is None or fault.done or rank not in fault.ranks or fault.where != "idle":
        return

    def later():
        if fault.do == "raise":
            fault.done = True
            _thread.interrupt_main()   # (KeyboardInterrupt in the main thread: the nearest to a raise there)
        else:
            fire(fault, rank, size)
    timer = threading.Timer(fault.count, later)
    timer.daemon = True
    timer.start()
