"""Point-to-point messages that say what they carry. Every send is a header (element count, dtype,
sequence number) on the group's user communicator, then the data on a second communicator; a
receive takes the header first and compares it with its tensor. A mismatch is an error naming
both sides, and the data is still received (into a buffer of the sender's size), so the next
message between the two ranks is unaffected. Without headers, a short receive gave MPI's raw
"Message truncated" and a long one silently left elements unwritten.

Two receives from the same peer and tag may be outstanding at once, and MPI matches messages to
them in the order they were posted; a header's data must go to the receive that took the header.
So a receive posts its data receive only when its turn comes: the headers between two ranks carry
a sequence number per tag, and data receives are posted in that order. Any test of any receive
moves every waiting receive along (``Mailbox.progress``), so waiting on the later one first can't
deadlock.
"""
from __future__ import annotations

import threading

import numpy as np

from .communicators.base import DistError, Request
from .descriptor import DTYPE_NAMES, DTYPES

_DTYPE_OF_CODE = {code: dtype for dtype, code in DTYPES.items()}


def header(buf, seq: int):
    return np.array([buf.size, DTYPES[buf.dtype], seq], np.int64)


def dtype_name(dtype) -> str:
    return DTYPE_NAMES[DTYPES[dtype]]


class Mailbox:
    """One rank's point-to-point state on a group: ``headers`` and ``data`` communicators, the
    sequence number of the next send to each (peer, tag), the next data receive due from each
    (peer, tag), and the receives whose data receive is not posted yet, in posting order."""

    def __init__(self, headers, data):
        self.headers, self.data = headers, data
        self.sent, self.due, self.waiting = {}, {}, []
        self.lock = threading.Lock()

    def isend(self, buf, dst: int, tag: int) -> list:
        """The header and the data, posted together (under the lock: another thread's send to the same
        peer and tag must not come between them). Waiting on them also moves this rank's receives
        along: a peer's large send completes only once the receive it matches posted its data part,
        and a rank that posted a receive and then waits on its own send must not stall it."""
        with self.lock:
            seq = self.sent.get((dst, tag), 0)
            self.sent[(dst, tag)] = seq + 1
            posted = [self.headers.isend_whole(header(buf, seq), dst, tag), self.data.isend(buf, dst, tag)]
        return [_Progressing(self, r) for r in posted]

    def irecv(self, buf, src, tag: int, mismatch) -> "CheckedRecv":
        """``mismatch(source, count, dtype)``: the error to raise when the sender's message is not
        ``buf``'s size and dtype."""
        request = CheckedRecv(self, buf, src, tag, mismatch)
        with self.lock:
            self.waiting.append(request)
        return request

    def progress(self) -> None:
        """Post the data receive of every waiting receive whose header arrived and whose turn it is."""
        with self.lock:
            moved = True
            while moved:
                moved = False
                for r in list(self.waiting):
                    try:
                        if r.source is None and not r.first.test():
                            continue
                    except DistError as e:  # that receive's own failure, raised by its own test()
                        r.error = e
                        self.waiting.remove(r)
                        continue
                    r.source = r.peer = r.first.source
                    key = (r.source, r.tag)
                    if int(r.header[2]) != self.due.get(key, 0):
                        continue
                    self.due[key] = int(r.header[2]) + 1
                    self.waiting.remove(r)
                    r.post_data()
                    moved = True


class _Progressing(Request):
    """A send whose tests also move the mailbox's receives along."""

    def __init__(self, mailbox, request):
        self.mailbox, self.request = mailbox, request
        self.peer, self.kind = request.peer, request.kind

    def test(self) -> bool:
        self.mailbox.progress()
        return self.request.test()

    def unfinished(self) -> list:
        return self.request.unfinished()


class CheckedRecv(Request):
    kind = "recv"

    def __init__(self, mailbox, buf, src, tag, mismatch):
        self.mailbox, self.buf, self.peer, self.tag, self.mismatch = mailbox, buf, src, tag, mismatch
        self.header = np.empty(3, np.int64)
        self.first = mailbox.headers.irecv_whole(self.header, src, tag)
        self.source = self.data = self.error = None

    def post_data(self) -> None:
        count, code = int(self.header[0]), int(self.header[1])
        into = self.buf
        if count != self.buf.size or _DTYPE_OF_CODE.get(code) != self.buf.dtype:
            self.error = self.mismatch(self.source, count, DTYPE_NAMES[code])
            into = np.empty_like(self.buf, dtype=_DTYPE_OF_CODE[code], shape=(count,))  # on the buffer's device
        self.data = self.mailbox.data.irecv(into, self.source, self.tag)

    def test(self) -> bool:
        if self.data is None:
            self.mailbox.progress()
            if self.data is None:
                if self.error is not None:
                    raise self.error
                return False
        if not self.data.test():
            return False
        if self.error is not None:
            raise self.error
        return True

    def unfinished(self) -> list:
        return [self]
