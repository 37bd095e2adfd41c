"""Streams and events, as ``torch.Stream``/``torch.cuda.Stream`` and ``torch.Event``/``torch.cuda.Event``.

A stream is an in-order queue of device work; kernels from different streams may run at the same
time. minidl launches every kernel on the *current* stream of the runtime (CuPy's current stream,
or the simulator's), so ``with stream:`` or :func:`set_stream` is all it takes to move work
between queues. An event is a marker in a stream: another stream can wait for it without the host
waiting, and two timed events measure the device time between them.

Ordering across streams is the program's job, as in CUDA and torch: a tensor written on one stream
and read on another needs ``wait_stream`` or an event between them.
"""
from __future__ import annotations

from .._device import device as Device
from ..kernels.cuda import runtime
from .devices import _index, current_device, is_available, set_device


DEVICE_TYPES = {"cpu": 0, "cuda": 1}


def _cuda_index(device) -> int:
    """The GPU index of ``device`` (None: the current one), which must be a CUDA device."""
    if device is not None and not isinstance(device, int) and Device(device).type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {Device(device)}")
    return _index(device)


def _check_same_device(what: str, device, stream) -> None:
    if stream.device != device:
        raise RuntimeError(f"{what}: the stream is on {stream.device} but the event on {device}")


class Stream:
    """An in-order queue of work on one device (torch.Stream).

    ``Stream()`` is a new stream of the current accelerator ('cuda' where it can run, else the
    CPU); the CPU's stream is a formality, as in torch: its work is always done. As a context
    manager the stream is current inside the block, and the previous one again after it."""

    def __init__(self, device=None, *, priority: int = 0):
        if device is None:
            device = "cuda" if is_available() else "cpu"
        if isinstance(device, int):
            device = Device(device)
        device = Device(device)
        self.device = device
        self.priority = int(priority)
        if device.type == "cuda":
            with runtime.get().on_device(_cuda_index(device)):
                self._handle = runtime.get().new_stream(self.priority)
        else:
            self._handle = None
        self._previous = []

    @classmethod
    def _wrap(cls, handle, index: int):
        """A Stream object for an existing runtime stream (the default or the current one)."""
        stream = cls.__new__(cls)
        stream.device, stream.priority, stream._handle, stream._previous = Device("cuda", index), 0, handle, []
        return stream

    @property
    def device_type(self) -> int:
        """torch's number for the device type (c10::DeviceType): 0 the CPU, 1 CUDA."""
        return DEVICE_TYPES[self.device.type]

    @property
    def device_index(self) -> int:
        return -1 if self.device.index is None else self.device.index

    @property
    def cuda_stream(self) -> int:
        """The raw stream handle (0: the legacy default stream)."""
        return 0 if self._handle is None else int(self._handle.ptr)

    stream_id = native_handle = cuda_stream

    def is_capturing(self) -> bool:
        """True while a graph capture records the work queued here."""
        return self._handle is not None and bool(self._handle.is_capturing())

    def query(self) -> bool:
        """True when all the work queued so far has finished."""
        return True if self._handle is None else bool(self._handle.done)

    def synchronize(self) -> None:
        """Wait on the host until all the work queued so far has finished."""
        if self._handle is not None:
            runtime.refuse_during_capture("Stream.synchronize")
            self._handle.synchronize()
            runtime.raise_pending_errors()

    def record_event(self, event=None):
        """Record ``event`` (default: a new one) here and return it."""
        event = Event(device=self.device) if event is None else event
        event.record(self)
        return event

    def wait_event(self, event) -> None:
        """Make the work queued here from now on wait for ``event`` (the host does not wait)."""
        if self._handle is not None and event._handle is not None:
            self._handle.wait_event(event._handle)

    def wait_stream(self, stream) -> None:
        """Make the work queued here from now on wait for the work queued on ``stream`` so far."""
        self.wait_event(stream.record_event())

    def __enter__(self):
        if self._handle is not None:
            self._previous.append(current_stream(self.device.index))
            set_stream(self)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._handle is not None:
            set_stream(self._previous.pop())

    def __eq__(self, other) -> bool:
        if not isinstance(other, Stream):
            return NotImplemented
        return self.device == other.device and self.cuda_stream == other.cuda_stream

    def __hash__(self) -> int:
        return hash((self.device, self.cuda_stream))

    def __repr__(self) -> str:
        return f"minidl.Stream device_type={self.device.type}, device_index={self.device_index}, " \
               f"stream_id={self.stream_id}"


class CudaStream(Stream):
    """``minidl.cuda.Stream(device=None, priority=0)``: a stream on a GPU (the current one by default)."""

    def __init__(self, device=None, priority: int = 0, **kwargs):
        super().__init__(Device("cuda", _cuda_index(device)), priority=priority)

    def __repr__(self) -> str:
        return f"<minidl.cuda.Stream device={self.device} cuda_stream={self.cuda_stream:#x}>"


class Event:
    """A marker in a stream (torch.Event): streams can wait for it, the host can wait for or
    query it, and two events made with ``enable_timing=True`` time the device work between them."""

    def __init__(self, device=None, *, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        if device is None:
            device = "cuda" if is_available() else "cpu"
        self.device = Device(device) if not isinstance(device, int) else Device("cuda", device)
        self.enable_timing, self.blocking, self.interprocess = enable_timing, blocking, interprocess
        self._handle = None  # made at the first record, on the recording stream's device, as in torch

    def record(self, stream=None) -> None:
        """Mark the work queued on ``stream`` (default: the current stream) so far."""
        if self.device.type != "cuda":
            raise RuntimeError(f"{self.device.type} backend doesn't support events.")
        stream = current_stream(self.device.index) if stream is None else stream
        _check_same_device("Event.record", self.device, stream)
        if self._handle is None:
            self._handle = runtime.get().new_event(self.enable_timing, self.blocking, self.interprocess)
        stream._handle.record(self._handle)

    def wait(self, stream=None) -> None:
        """Make the work queued on ``stream`` (default: the current stream) from now on wait for this event."""
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        """True when the marked work has finished (an event never recorded counts as finished)."""
        return True if self._handle is None else bool(self._handle.done)

    def synchronize(self) -> None:
        """Wait on the host until the marked work has finished."""
        if self._handle is not None:
            runtime.refuse_during_capture("Event.synchronize")
            self._handle.synchronize()

    def elapsed_time(self, end_event) -> float:
        """Milliseconds of device time between this event and ``end_event``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._handle is None or end_event._handle is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        self.synchronize()
        end_event.synchronize()
        return float(runtime.get().elapsed_ms(self._handle, end_event._handle))

    @property
    def cuda_event(self) -> int:
        """The raw event handle (0 until the first record)."""
        return 0 if self._handle is None else int(self._handle.ptr)

    event_id = cuda_event

    def __repr__(self) -> str:
        return f"<minidl.cuda.Event {self.cuda_event:#x}>" if self._handle is not None \
            else "<minidl.cuda.Event uninitialized>"


class CudaEvent(Event):
    """``minidl.cuda.Event(enable_timing=False, blocking=False, interprocess=False)``: an event of the GPUs."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False):
        super().__init__(Device("cuda", current_device()), enable_timing=enable_timing, blocking=blocking,
                         interprocess=interprocess)


def current_stream(device=None) -> CudaStream:
    """The stream kernels launch on now, on ``device`` (default: the current GPU)."""
    index = _cuda_index(device)
    with runtime.get().on_device(index):
        return CudaStream._wrap(runtime.get().current_stream(), index)


def default_stream(device=None) -> CudaStream:
    """The legacy default stream of ``device``: where kernels launch unless a stream is set."""
    index = _cuda_index(device)
    return CudaStream._wrap(runtime.get().default_stream(), index)


def set_stream(stream) -> None:
    """Make ``stream`` current (and its device the current GPU); None changes nothing, as in torch."""
    if stream is None:
        return
    if stream.device.type != "cuda":
        raise ValueError(f"set_stream: expected a stream of device type cuda, got one of {stream.device.type}")
    set_device(stream.device.index)
    runtime.get().use_stream(stream._handle)


class StreamContext:
    """``with minidl.cuda.stream(s):`` — ``s`` is current inside the block (None: nothing changes)."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def __enter__(self):
        if self.stream is not None:
            self.stream.__enter__()
        return self.stream

    def __exit__(self, *exc_info) -> None:
        if self.stream is not None:
            self.stream.__exit__(*exc_info)


def stream(stream) -> StreamContext:
    return StreamContext(stream)
