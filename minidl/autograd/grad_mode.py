"""Whether ops record the graph: thread-local, as in PyTorch."""
import functools
import threading


class _State(threading.local):
    enabled = True
    inference = False


state = _State()


def is_grad_enabled() -> bool:
    return state.enabled


def is_inference_mode_enabled() -> bool:
    return state.inference


class _Mode:
    """Base for grad-mode switches: a context manager and a function decorator, with or without
    the call (``@no_grad()`` and ``@no_grad``, as in PyTorch)."""

    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return cls()(args[0])  # used bare as a decorator
        return super().__new__(cls)

    def _target(self):
        raise NotImplementedError

    def __enter__(self):
        self._prev = (state.enabled, state.inference)
        state.enabled, state.inference = self._target()
        return self

    def __exit__(self, *exc):
        state.enabled, state.inference = self._prev
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)
        return wrapper

    _args = ()


class no_grad(_Mode):
    """Ops inside do not record the graph; results do not require grad."""

    def _target(self):
        return False, state.inference


class enable_grad(_Mode):
    def _target(self):
        return True, state.inference


class inference_mode(_Mode):
    """Like no_grad, for pure inference code."""

    def __init__(self, mode: bool = True):
        self._args = (mode,)
        self.mode = mode

    def _target(self):
        return (False, True) if self.mode else (state.enabled, False)


class set_grad_enabled(_Mode):
    """Takes effect immediately when called as a function, and restores on exit as a context."""

    def __init__(self, mode: bool):
        self._args = (mode,)
        self._prev = (state.enabled, state.inference)
        state.enabled = bool(mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        state.enabled, state.inference = self._prev  # used as a decorator: undo the immediate switch
        return super().__call__(fn)

    def _target(self):
        return self._args[0], state.inference
