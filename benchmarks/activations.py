"""GELU (both forms) and SiLU beside PyTorch eager: forward, and forward + backward, on a GPT MLP's
hidden activations (float32, 8 x 64 tokens x 3072 features by default), on one thread each.

Each is one kernel forward and one backward in both libraries (issue 40); the timing method is
``bench_ops.measure``'s (libraries take turns trial by trial; medians of per-call means).

Usage::

    python benchmarks/activations.py               # a few seconds
    python benchmarks/activations.py --rows 2048 --threads 2
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


def cases(rows, features):
    x = np.random.default_rng(0).standard_normal((rows, features), dtype=np.float32)
    ours, theirs = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    upstream, t_upstream = minidl.ones(rows, features), torch.ones(rows, features)
    pairs = {"gelu": (F.gelu, torch.nn.functional.gelu),
             "gelu tanh": (lambda t: F.gelu(t, approximate="tanh"),
                           lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
             "silu": (F.silu, torch.nn.functional.silu)}
    for name, (mine, torchs) in pairs.items():
        np.testing.assert_allclose(mine(ours).detach().numpy(), torchs(theirs).detach().numpy(), rtol=1e-5, atol=1e-6)

        def forward(fn=mine, grad_mode=minidl.no_grad, x=ours):
            with grad_mode():
                fn(x)

        def step(fn=mine, x=ours, g=upstream):
            x.grad = None
            fn(x).backward(g)

        def t_step(fn=torchs, x=theirs, g=t_upstream):
            x.grad = None
            fn(x).backward(g)

        yield f"{name} forward", {"minidl": forward,
                                  "torch": lambda fn=torchs: forward(fn, torch.no_grad, theirs)}
        yield f"{name} forward + backward", {"minidl": step, "torch": t_step}


def main(argv=None):
    parser = comparison_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--rows", type=int, default=512, help="tokens (batch x sequence)")
    parser.add_argument("--features", type=int, default=3072)
    args = parser.parse_args(argv)
    print_comparison(args, f"float32 ({args.rows}, {args.features})", cases(args.rows, args.features))


if __name__ == "__main__":
    main()
