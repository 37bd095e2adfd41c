"""A nested state dict as flat keys, and back.

``{"model": {"fc.weight": w}, "optim": {"state": {0: {"step": s}}, "param_groups": [{"lr": 0.1, ...}]}}``
becomes the keys ``model.fc.weight``, ``optim.state.0.step``, ``optim.param_groups.0.lr`` ... as torch names
them: dicts are walked into (an empty one is no key at all); a list is walked into where a tensor, a dict
or a list walked into is inside it; anything else is a leaf — a tensor, or a plain value kept whole. Unlike
torch (which pickles a tuple whole), a tuple holding a tensor is walked into too, as no pickle is written.
Each key keeps its *path* — the dict keys and list indices that lead to it — so ``load`` can put a plain
value back where it was, and a checkpoint can be rebuilt as a nested dict with no state dict to load into.
A path is a list of ``["dict", key]`` / ``["list", index]`` steps (JSON keeps a key's type, so the
optimizer's integer ids stay integers).
"""
from __future__ import annotations

from .slices import slices_of


def is_stateful(value) -> bool:
    """An object that saves through ``state_dict()`` and loads through ``load_state_dict()`` (a module, an
    optimizer, a scheduler, a ``Stateful``)."""
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _walked(value) -> bool:
    """Whether ``flatten`` walks into ``value`` rather than keeping it as one leaf."""
    if isinstance(value, dict):
        return True
    if isinstance(value, list):
        return any(slices_of(v) is not None or _walked(v) for v in value)
    if isinstance(value, tuple):
        return any(slices_of(v) is not None or (isinstance(v, (dict, list, tuple)) and _walked(v)) for v in value)
    return False


def flatten(state_dict: dict, what: str):
    """(key -> leaf, key -> path) of a state dict, in its order. Two paths that name one key are an error."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    leaves, paths = {}, {}

    def walk(value, path):
        if path and not _walked(value):
            key = ".".join(str(k) for _, k in path)
            if key in leaves:
                raise ValueError(f"{what}: two values of the state dict are both named {key!r} when flattened "
                                 f"({_show(paths[key])} and {_show(path)}); rename one")
            leaves[key], paths[key] = value, [list(step) for step in path]
            return
        steps = [("dict", k) for k in value] if isinstance(value, dict) else [("list", i) for i in range(len(value))]
        for step, child in zip(steps, value.values() if isinstance(value, dict) else value):
            walk(child, [*path, step])

    walk(state_dict, [])
    return leaves, paths


def _show(path) -> str:
    return "".join(f"[{k!r}]" for _, k in path)


def set_leaf(node, path, value):
    """``node`` with ``value`` put at ``path``: dicts and lists changed in place (made, or grown, as needed),
    tuples rebuilt. Returns the node (a new one where it was a tuple)."""
    if not path:
        return value
    (kind, key), rest = path[0], path[1:]
    if node is None:
        node = {} if kind == "dict" else []
    if isinstance(node, tuple):
        items = list(node)
        items[key] = set_leaf(items[key], rest, value)
        return tuple(items)
    if kind == "list":
        node.extend([None] * (key + 1 - len(node)))
    node[key] = set_leaf(node[key] if kind == "list" else node.get(key), rest, value)
    return node
