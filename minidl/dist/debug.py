"""MINIDL_DIST_DEBUG=1: before each collective, the ranks exchange a fingerprint of the call
(op, shape, dtype, reduce op, root, sequence number, call site) and all raise if they differ,
rather than running mismatched collectives that would hang or compute garbage. And the counts of the
collectives a thread (a rank: a process, or a sim rank's thread) calls while it watches them
(``CommDebugMode``).
"""
from __future__ import annotations

import collections
import os
import sys
import threading

from .communicators.base import DistError

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def enabled() -> bool:
    return os.environ.get("MINIDL_DIST_DEBUG", "0") not in ("", "0")


def call_site() -> str:
    """file:line of the first caller outside minidl.dist."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def fingerprint(collective: str, seq: int, tensor=None, **details) -> dict:
    fp = {"collective": collective, "seq": seq}
    if tensor is not None:
        fp.update(shape=tuple(tensor.shape), dtype=tensor.dtype.name)
    fp.update({k: repr(v) for k, v in details.items() if v is not None})
    fp["site"] = call_site()
    return fp


def check(fingerprints, ranks) -> None:
    """Raise on every rank if the ranks' fingerprints (``site`` aside) differ."""
    def key(fp):
        return {k: v for k, v in fp.items() if k != "site"}
    if all(key(fp) == key(fingerprints[0]) for fp in fingerprints):
        return
    lines = [f"  rank {r}: {fp['collective']}(" + ", ".join(f"{k}={v}" for k, v in fp.items()
                                                      if k not in ("collective", "site"))
             + f") at {fp['site']}" for r, fp in zip(ranks, fingerprints)]
    raise DistError("MINIDL_DIST_DEBUG: the ranks called different collectives:\n" + "\n".join(lines))


def sent_bytes(group=None) -> int:
    """Bytes of data this rank has sent in collectives and point-to-point messages on ``group`` (the default group
    for None) since it was made (its start's exchange of host names included), by minidl's own algorithms: the
    agreement before each collective (a few int64 sent whole) is not counted, and a native collective (MPI's,
    NCCL's) sends what its library sends, uncounted. Take differences around what you measure."""
    from .state import resolve
    return resolve(group, "sent_bytes").sent[0]


_watching = threading.local()   # this thread's counters, one per watch entered (nested watches all count)


def counted(what: str) -> None:
    """A collective (or message) ``what`` is called on this thread: every counter watching here counts it."""
    for counter in getattr(_watching, "counters", ()):
        counter[what] += 1


def watch() -> collections.Counter:
    """Start counting this thread's collectives by name, into the Counter returned (until ``unwatch``)."""
    counter = collections.Counter()
    _watching.counters = (*getattr(_watching, "counters", ()), counter)
    return counter


def unwatch(counter) -> None:
    _watching.counters = tuple(c for c in getattr(_watching, "counters", ()) if c is not counter)
