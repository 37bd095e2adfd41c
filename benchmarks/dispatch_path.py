"""Where one small op spends its time between the public call and the kernel (issue 38).

A 16x16 float32 ``a * b`` is timed layer by layer, each row adding one layer on top of the one
before it, so that the differences between rows are what each layer costs:

- the Numba call of the compiled serial kernel, its arguments prepared beforehand;
- the CPU ``binary`` kernel wrapper (stride checks, flat-run plan);
- ``binary_raw`` (kernel lookup, broadcast and dtype checks, the allocation of the result);
- ``Mul.forward`` (type promotion) inside ``Function.apply`` with no graph to record;
- ``a * b`` (Tensor's operator) and ``minidl.mul(a, b)`` (the registry's public function), and
  ``a.exp()`` and ``a * 2.0`` beside them (a unary op, a number operand);
- ``a * b`` on leaves that require grad (an autograd node and its edges);
- one backward node: ``MulBackward``'s ``run_backward`` on a gradient (grad mode off);
- and a whole ``(a * b + c).sum().backward()``, bench_ops.py's forward+backward row.

PyTorch's ``a * b`` and forward+backward are timed the same way, in the same process and round.

Each row is the minimum over repeats of the mean of many back-to-back calls, in the thread's CPU
time (``time.thread_time``: time spent descheduled on a loaded machine does not count; what other
processes do to the caches still does, so the minimum is taken). ``--against DIR`` runs the same rows on
the minidl found in DIR (an older checkout) in a subprocess, the two taking turns round by round,
and prints both columns; the numbers are comparable only within one run.

Usage::

    python benchmarks/dispatch_path.py                     # this checkout's rows
    python benchmarks/dispatch_path.py --against /path/to/old/checkout --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import timeit

import numpy as np


def rows(repeat: int, number: int) -> dict:
    """name -> µs per call, for this process's minidl."""
    import minidl
    from minidl.kernels.cpu import elementwise as cpu_ew
    from minidl.kernels.cpu.jit.elementwise import binary_serial
    from minidl.ops import elementwise as ew
    from minidl.ops.core import new_like_shape

    minidl.set_num_threads(1)
    rng = np.random.default_rng(0)
    a, b = (minidl.tensor(rng.standard_normal((16, 16)).astype(np.float32)) for _ in range(2))
    out = new_like_shape(a.shape, a.dtype, a)
    ab, bb, ob, lay = a._storage.buf, b._storage.buf, out._storage.buf, a._layout
    shape, items = cpu_ew.flat_shape(256)
    unit, code = cpu_ew._UNIT, cpu_ew.BINARY_CODE["mul"]
    ga, gb = (minidl.tensor(x.numpy(), requires_grad=True) for x in (a, b))
    node = (ga * gb).grad_fn
    g = minidl.ones(16, 16)
    gc = minidl.tensor(b.numpy(), requires_grad=True)
    mul = ew.Mul
    cases = {
        "numba call": lambda: binary_serial(code, ab, 0, unit, bb, 0, unit, ob, 0, unit, shape, items),
        "cpu kernel wrapper": lambda: cpu_ew.binary("mul", ab, lay, bb, lay, ob, lay),
        "binary_raw": lambda: ew.binary_raw("binary", "mul", a, b, minidl.float32, minidl.float32),
        "Mul.apply (no grad)": lambda: mul.apply(a, b),
        "a * b": lambda: a * b,
        "minidl.mul(a, b)": lambda: minidl.mul(a, b),
        "a.exp() (a unary op)": lambda: a.exp(),
        "a * 2.0 (a number)": lambda: a * 2.0,
        "a * b, requires_grad": lambda: ga * gb,
        "MulBackward node": lambda: node.run_backward((g,)),
        "(a * b + c).sum().backward()": lambda: (ga * gb + gc).sum().backward(),
    }
    found = {}
    with minidl.no_grad():
        for name in ("numba call", "cpu kernel wrapper", "binary_raw", "Mul.apply (no grad)"):
            found[name] = _time(cases[name], repeat, number)
    for name in ("a * b", "minidl.mul(a, b)", "a.exp() (a unary op)", "a * 2.0 (a number)", "a * b, requires_grad"):
        found[name] = _time(cases[name], repeat, number)
    with minidl.no_grad():
        found["MulBackward node"] = _time(cases["MulBackward node"], repeat, number // 4)
    found["(a * b + c).sum().backward()"] = _time(cases["(a * b + c).sum().backward()"], repeat, number // 10)
    found.update((f"torch {name}", us) for name, us in torch_rows(repeat, number).items())
    return found


def _time(fn, repeat, number) -> float:
    fn()
    return min(timeit.repeat(fn, repeat=repeat, number=number, timer=time.thread_time)) / number * 1e6


def torch_rows(repeat: int, number: int) -> dict:
    try:
        import torch
    except Exception:  # noqa: BLE001 (no torch: no reference rows)
        return {}
    torch.set_num_threads(1)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    ga, gb, gc = (torch.randn(16, 16, requires_grad=True) for _ in range(3))
    return {"a * b": _time(lambda: a * b, repeat, number),
            "(a * b + c).sum().backward()": _time(lambda: (ga * gb + gc).sum().backward(), repeat, number // 10)}


def _one_round(tree, repeat, number) -> dict:
    """The rows measured in a subprocess that imports minidl from ``tree``."""
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--json-rows", "--repeat", str(repeat), "--number", str(number)]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", help="an older checkout to measure beside this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--json-rows", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json_rows:
        print(json.dumps(rows(args.repeat, args.number)))
        return
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"new": here} if not args.against else {"old": args.against, "new": here}
    best: dict = {k: {} for k in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            for name, us in _one_round(tree, args.repeat, args.number).items():
                best[label][name] = min(us, best[label].get(name, us))
    print("| layer (cumulative) | " + " | ".join(f"{k} µs" for k in trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for name in best["new"]:
        print(f"| {name} | " + " | ".join(f"{best[k][name]:.2f}" for k in trees) + " |")
    for name in ("a * b", "(a * b + c).sum().backward()"):
        if f"torch {name}" in best["new"]:
            print(f"\n{name}, minidl / torch: " + ", ".join(f"{k} {best[k][name] / best[k]['torch ' + name]:.2f}x"
                                                        for k in trees))


if __name__ == "__main__":
    main()
