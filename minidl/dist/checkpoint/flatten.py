"""A nested state dict as flat keys, and back.

``{"model": {"fc.weight": w}, "optim": {"state": {0: {"step": s}}, "param_groups": [...]}}`` becomes the
keys ``model.fc.weight``, ``optim.state.0.step`` and ``optim.param_groups`` (as torch names them): dicts are
walked into, lists and tuples only where a tensor is inside them, and anything else is a leaf. Each key
keeps its *path* — the dict keys and list indices that lead to it — so ``load`` can put a plain value
back where it was, and a checkpoint can be rebuilt as a nested dict with no state dict to load into.
A path is a list of ``["dict", key]`` / ``["list", index]`` steps (JSON keeps a key's type, so the
optimizer's integer ids stay integers).
"""
from __future__ import annotations

from .slices import slices_of


def is_stateful(value) -> bool:
    """An object that saves through ``state_dict()`` and loads through ``load_state_dict()`` (a module, an
    optimizer, a scheduler, a ``Stateful``)."""
    return callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None))


def _holds_tensor(value) -> bool:
    if slices_of(value) is not None:
        return True
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    return False


def flatten(state_dict: dict, what: str):
    """(key -> leaf, key -> path) of a state dict, in its order. Two paths that name one key are an error."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{what}: state_dict must be a dict, got {type(state_dict).__name__}")
    leaves, paths = {}, {}

    def walk(value, path):
        if isinstance(value, dict):   # (an empty one is no key at all, as in torch)
            steps = [("dict", k) for k in value]
            children = value.values()
        elif isinstance(value, (list, tuple)) and _holds_tensor(value):
            steps = [("list", i) for i in range(len(value))]
            children = value
        else:
            key = ".".join(str(k) for _, k in path)
            if key in leaves:
                raise ValueError(f"{what}: two values of the state dict are both named {key!r} when flattened "
                                 f"({_show(paths[key])} and {_show(path)}); rename one")
            leaves[key], paths[key] = value, [list(step) for step in path]
            return
        for step, child in zip(steps, children):
            walk(child, [*path, step])

    walk(state_dict, [])
    return leaves, paths


def _show(path) -> str:
    return "".join(f"[{k!r}]" for _, k in path)


def set_leaf(root, path, value) -> None:
    """Put ``value`` at ``path`` of ``root``, making the dicts and lists on the way (lists grow as needed)."""
    node = root
    for (kind, key), (next_kind, _) in zip(path, [*path[1:], (None, None)]):
        last = next_kind is None
        if kind == "list":
            while len(node) <= key:
                node.append(None)
            if last:
                node[key] = value
            elif node[key] is None:
                node[key] = {} if next_kind == "dict" else []
        else:
            if last:
                node[key] = value
            elif key not in node:
                node[key] = {} if next_kind == "dict" else []
        if not last:
            node = node[key]
