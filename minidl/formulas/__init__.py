"""Elementwise ops' math, written once as formulas (``table.py``) and turned into each device's
kernel code (``generate.py``). Pure Python: imported by the kernel contract and by the op layer."""
from .table import BINARY, CODED, COMPARE, UNARY  # noqa: F401
