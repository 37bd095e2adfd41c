"""Handles returned by register_hook-style calls, and running the hooks."""
from .. import _tracing


class RemovableHandle:
    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def apply_hooks(hooks, grad):
    """Run gradient hooks in order; a hook returning non-None replaces the gradient."""
    if hooks:
        _tracing.graph_break("a gradient hook runs Python during the backward")
    for hook in hooks or ():
        new = hook(grad)
        if new is not None:
            grad = new
    return grad
