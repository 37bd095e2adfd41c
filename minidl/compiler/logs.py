"""What minidl.compile reports: ``MINIDL_LOGS=recompiles,graph_breaks`` (torch's ``TORCH_LOGS`` names),
or ``minidl.compiler.set_logs(recompiles=True, graph_breaks=True)``. Reports go to the loggers
``minidl.compile.recompiles`` and ``minidl.compile.graph_breaks`` as warnings (stderr by default)."""
from __future__ import annotations

import logging
import os

KINDS = ("recompiles", "graph_breaks")
_set: dict = {}   # kind -> bool, from set_logs (wins over the environment)


def set_logs(**kinds) -> None:
    for kind, on in kinds.items():
        if kind not in KINDS:
            raise ValueError(f"set_logs: unknown log {kind!r}; minidl.compile logs {', '.join(KINDS)}")
        _set[kind] = bool(on)


def enabled(kind: str) -> bool:
    if kind in _set:
        return _set[kind]
    wanted = os.environ.get("MINIDL_LOGS", "")
    return kind in {w.strip().lstrip("+") for w in wanted.split(",")}


def report(kind: str, message: str) -> None:
    if enabled(kind):
        logging.getLogger(f"minidl.compile.{kind}").warning(message)
