"""F.cross_entropy on logits beside PyTorch eager: forward, and forward + backward, float32, on one thread
each, for the shapes the benchmarks end in (the MLP's 128 x 10, the GPTs' batch x seq tokens over a vocabulary of
65) and a word-level vocabulary; the GPT shapes also with ignore_index hits and label smoothing.

One kernel forward and one backward in minidl (issue 40: ``cross_entropy`` primitives); the timing method is
``bench_ops.measure``'s (libraries take turns trial by trial; medians of per-call means). Run it on another
checkout (PYTHONPATH) to compare with the composed log_softmax + gather of before.

Usage::

    python benchmarks/cross_entropy.py               # a few seconds
    python benchmarks/cross_entropy.py --threads 2
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import minidl
import minidl.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ops import comparison_args, print_comparison  # noqa: E402

import torch  # noqa: E402

SHAPES = {"MLP": (128, 10), "tiny GPT": (512, 65), "small GPT": (2048, 65), "word vocabulary": (640, 10000)}


def cases():
    rng = np.random.default_rng(0)
    for name, (rows, classes) in SHAPES.items():
        x = rng.standard_normal((rows, classes), dtype=np.float32)
        target = rng.integers(0, classes, rows)
        variants = [("", {})]
        if "GPT" in name:
            target[::7] = -100
            variants.append((", label_smoothing 0.1", {"label_smoothing": 0.1}))
        for suffix, kw in variants:
            ours, theirs = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
            t_ours, t_theirs = minidl.tensor(target), torch.tensor(target)
            np.testing.assert_allclose(F.cross_entropy(ours, t_ours, **kw).item(),
                                       torch.nn.functional.cross_entropy(theirs, t_theirs, **kw).item(), rtol=1e-5)

            def forward(x=ours, t=t_ours, kw=kw):
                with minidl.no_grad():
                    F.cross_entropy(x, t, **kw)

            def t_forward(x=theirs, t=t_theirs, kw=kw):
                with torch.no_grad():
                    torch.nn.functional.cross_entropy(x, t, **kw)

            def step(x=ours, t=t_ours, kw=kw):
                x.grad = None
                F.cross_entropy(x, t, **kw).backward()

            def t_step(x=theirs, t=t_theirs, kw=kw):
                x.grad = None
                torch.nn.functional.cross_entropy(x, t, **kw).backward()

            label = f"{name} {rows}x{classes}{suffix}"
            yield f"{label} forward", {"minidl": forward, "torch": t_forward}
            yield f"{label} forward + backward", {"minidl": step, "torch": t_step}


def main(argv=None):
    args = comparison_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    print_comparison(args, "float32", cases(), unit="µs")


if __name__ == "__main__":
    main()
