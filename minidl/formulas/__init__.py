"""Elementwise ops' math, written once as formulas (``table.py``) and turned into each device's
kernel code (``generate.py``). Pure Python: imported by the kernel contract and by the op layer."""
from .table import ARG_REDUCE, BINARY, CODED, COMPARE, HELPERS, RANDOM, REDUCE, SCAN, UNARY  # noqa: F401
