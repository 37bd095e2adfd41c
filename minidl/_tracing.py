"""The slots through which minidl watches itself run: an exporter watching ops, a compiler recording
kernel launches. Kept in a module of its own at the bottom of the layers so that the kernels, the
autograd and the registry can look at them without importing either tool.

``active`` is None except while ``minidl.onnx.export`` traces a model: then every op declared in
the registry (``ops.registry``) and every ``Function.apply`` outside one passes through
``active.call``/``active.function``, which runs it and records it.

``recording()`` is the recorder of ``minidl.compile`` capturing on the calling thread, or None. A
capture belongs to one thread: kernels launched by a DDP communication thread or a data-loader
thread while another thread captures are never part of its graph. The lower layers tell the
recorder what it cannot see in kernel launches alone: a gradient set (``grad_set``), a draw from a
generator (``claim``), Python state updated at every call (``host_step``), a module run
(``saw_module``), and what makes a call uncapturable (``graph_break``).
"""
import threading

active = None

_here = threading.local()
captures = 0   # recorders active on any thread: the fast path's test (one global read when none)
_counting = threading.Lock()


def recording():
    """The recorder capturing on this thread, or None."""
    return getattr(_here, "recorder", None) if captures else None


def start_recording(recorder) -> None:
    global captures
    if recording() is not None:
        raise RuntimeError("minidl.compile: a compiled function was called while another one was being "
                           "captured on the same thread; nested compiled calls are not supported")
    _here.recorder = recorder
    with _counting:
        captures += 1


def stop_recording() -> None:
    global captures
    if getattr(_here, "recorder", None) is not None:
        _here.recorder = None
        with _counting:
            captures -= 1


def graph_break(reason: str) -> None:
    """Tell the recorder on this thread, if any, that the call does something it cannot replay."""
    rec = recording()
    if rec is not None:
        rec.graph_break(reason)


def host_step(run):
    """``run()`` now; while a call is being captured, also at every replay of it: for Python state
    that changes from call to call (an optimizer's step counts and learning rates, read afresh)."""
    rec = recording()
    return run() if rec is None else rec.host_step(run)


def host_check(check) -> None:
    """``check()`` now; while a call is being captured, also at every replay of it. For an op's check of
    its arguments' values (an index in range) that only decides whether to raise: its reads are not
    guards (a replay with other values in range must not capture again), and a replay still raises."""
    rec = recording()
    if rec is None:
        check()
    else:
        rec.host_check(check)


def made_once(make):
    """``make()`` now and never at a replay: state a call makes lazily and keeps past it (GradScaler's
    scale). Captured like any tensor, it would be the graph's own buffer, made afresh by every replay
    while the caller's later updates of it (``scaler.update()``) were lost."""
    rec = recording()
    return make() if rec is None else rec.made_once(make)
