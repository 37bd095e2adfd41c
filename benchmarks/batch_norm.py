"""Batch norm beside PyTorch eager: F.batch_norm in training mode (running statistics updated), forward and
forward + backward (input, weight and bias gradients), float32, one thread each, on the shapes of the lenet_bn
model of train_step.py (batch 64: after conv1 (64, 32, 26, 26) and conv2 (64, 64, 11, 11)), an MLP's (128, 512),
and a channels-last image batch.

Each is one kernel forward and one backward in minidl (issue 40); the timing method is ``bench_ops.measure``'s
(libraries take turns trial by trial; medians of per-call means).

Usage::

    python benchmarks/batch_norm.py                # a few seconds
    python benchmarks/batch_norm.py --threads 2
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

SHAPES = {"conv1 (64, 32, 26, 26)": ((64, 32, 26, 26), False), "conv2 (64, 64, 11, 11)": ((64, 64, 11, 11), False),
          "mlp (128, 512)": ((128, 512), False), "channels-last (32, 64, 16, 16)": ((32, 64, 16, 16), True)}


def cases():
    rng = np.random.default_rng(0)
    for label, (shape, last) in SHAPES.items():
        x = rng.standard_normal(shape, dtype=np.float32)
        C = shape[1]
        sides = {}
        for name, lib, F_ in (("minidl", minidl, F), ("torch", torch, torch.nn.functional)):
            t = lib.tensor(x)
            if last:
                t = t.contiguous(memory_format=lib.channels_last)
            w, b = lib.ones(C, requires_grad=True), lib.zeros(C, requires_grad=True)
            sides[name] = (lib, F_, t.requires_grad_(), w, b, lib.zeros(C), lib.ones(C), lib.ones(shape))
        outs = [F_.batch_norm(t, rm.clone(), rv.clone(), w, b, training=True).detach().numpy()
                for lib, F_, t, w, b, rm, rv, g in sides.values()]
        np.testing.assert_allclose(*outs, rtol=1e-4, atol=1e-4)

        def forward(side):
            lib, F_, t, w, b, rm, rv, g = side
            with lib.no_grad():
                F_.batch_norm(t, rm, rv, w, b, training=True)

        def step(side):
            lib, F_, t, w, b, rm, rv, g = side
            t.grad = w.grad = b.grad = None
            F_.batch_norm(t, rm, rv, w, b, training=True).backward(g)

        yield f"{label} forward", {n: (lambda s=s: forward(s)) for n, s in sides.items()}
        yield f"{label} forward + backward", {n: (lambda s=s: step(s)) for n, s in sides.items()}


def main(argv=None):
    args = comparison_args(argparse.ArgumentParser(description=__doc__.splitlines()[0])).parse_args(argv)
    print_comparison(args, "float32, training mode", cases())


if __name__ == "__main__":
    main()
