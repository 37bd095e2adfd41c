"""Write (or check) the files generated from the formula table.

    python -m minidl.formulas.generate           # after editing minidl/formulas/table.py
    python -m minidl.formulas.generate --check   # exit 1 if a generated file is stale

The generated files are checked in, so a reader finds each device's kernel code where it runs,
Numba's disk cache sees it, and the tests fail when the table and the files disagree.
"""
from __future__ import annotations

import argparse
import os
import sys

from . import cuda_source, numba_source

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # minidl/
TARGETS = {
    os.path.join("kernels", "cpu", "jit", "op_codes.py"): numba_source.op_codes,
    os.path.join("kernels", "cpu", "jit", "formulas.py"): numba_source.formulas,
    os.path.join("kernels", "cuda", "csrc", "op_codes.cuh"): cuda_source.op_codes,
    os.path.join("kernels", "cuda", "csrc", "formulas.cuh"): cuda_source.formulas,
}


def stale(package: str = PACKAGE) -> list:
    """The generated files under ``package`` whose text differs from what the table gives."""
    out = []
    for path, make in TARGETS.items():
        full = os.path.join(package, path)
        current = None
        if os.path.exists(full):
            with open(full) as f:
                current = f.read()
        if current != make():
            out.append(path)
    return out


def write(package: str = PACKAGE) -> list:
    written = []
    for path in stale(package):
        with open(os.path.join(package, path), "w") as f:
            f.write(TARGETS[path]())
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="generate the kernels' code from minidl/formulas/table.py")
    parser.add_argument("--check", action="store_true", help="only report stale files (exit status 1)")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"stale: minidl/{path} (run python -m minidl.formulas.generate)")
        return 1 if old else 0
    for path in write():
        print(f"wrote minidl/{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
