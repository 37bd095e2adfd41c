"""The simulator's streams, events and graphs: stand-ins with the names and methods of CuPy's
``cupy.cuda.Stream``, ``Event`` and ``Graph``, so ``minidl.cuda.streams`` drives both alike.

The simulator runs every kernel to the end when it is launched, so the host never sees unfinished
work: a stream is always idle, an event is complete once recorded, and making one stream wait for
another orders nothing. What the simulator does model is capture, the part a program can get
wrong: while a stream captures, the work launched on it is recorded instead of run (as CUDA records
it into a graph), and launching the graph runs the record again on the very same buffers.
"""
from __future__ import annotations

import itertools
import time

_handles = itertools.count(2)  # 0 is the legacy default stream, as in CUDA


class SimStream:
    """An in-order queue of device work (``ptr`` 0 is the default stream)."""

    def __init__(self, priority: int = 0, ptr: int = None):
        self.ptr = next(_handles) if ptr is None else ptr
        self.priority = priority
        self.recording = None  # the launches recorded while capturing, else None

    done = True  # nothing is ever pending

    def synchronize(self) -> None:
        pass

    def record(self, event=None):
        event = SimEvent() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event) -> None:
        pass

    def is_capturing(self) -> bool:
        return self.recording is not None

    def begin_capture(self, mode=None) -> None:
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        if self.recording is not None:
            raise RuntimeError("this stream is capturing already")
        self.recording = []

    def end_capture(self):
        if self.recording is None:
            raise RuntimeError("this stream is not capturing")
        graph, self.recording = SimGraph(self.recording), None
        return graph

    def run_or_record(self, function, args, kwargs) -> None:
        """Run one piece of device work now, or record it while the stream captures."""
        if self.recording is None:
            function(*args, **kwargs)
        else:
            self.recording.append((function, args, kwargs))


class SimEvent:
    """A marker in a stream; it holds the host clock at its recording, for ``elapsed_ms``."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.ptr = next(_handles)
        self.timing = not disable_timing
        self.recorded_at = None

    done = True

    def record(self, stream=None) -> None:
        self.recorded_at = time.perf_counter()

    def synchronize(self) -> None:
        pass


def elapsed_ms(start: SimEvent, end: SimEvent) -> float:
    """Milliseconds between two recorded events (of the host clock: simulated kernels run there)."""
    return (end.recorded_at - start.recorded_at) * 1e3


class SimGraph:
    """A captured sequence of launches; ``launch`` runs them again, in order."""

    def __init__(self, launches: list):
        self.launches = launches

    def launch(self, stream=None) -> None:
        for function, args, kwargs in self.launches:
            function(*args, **kwargs)
