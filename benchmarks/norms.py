"""Layer, RMS and group norm beside PyTorch eager: forward, and forward + backward (input and parameter
gradients), float32, on one thread each. Layer/RMS norm on a GPT block's activations (8 x 64 tokens x 768
features by default), group norm on a conv feature map (8 x 64 channels x 32 x 32, 32 groups).

Each is one kernel forward and one backward in minidl (the norm_rows primitives, issue 40); the timing
method is ``bench_ops.measure``'s (libraries take turns trial by trial; medians of per-call means).

Usage::

    python benchmarks/norms.py               # a few seconds
    python benchmarks/norms.py --rows 2048 --threads 2
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


def _pair(shape, rng):
    a = rng.standard_normal(shape, dtype=np.float32)
    return minidl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def cases(rows, features, image):
    rng = np.random.default_rng(0)
    tokens, feature_map = (rows, features), (8, 64, image, image)
    tf = torch.nn.functional
    specs = {  # name: (input shape, parameter shape, minidl call, torch call)
        "layer_norm": (tokens, (features,), lambda x, w, b: F.layer_norm(x, (features,), w, b),
                       lambda x, w, b: tf.layer_norm(x, (features,), w, b)),
        "rms_norm": (tokens, (features,), lambda x, w, b: F.rms_norm(x, (features,), w),
                     lambda x, w, b: tf.rms_norm(x, (features,), w)),
        "group_norm": (feature_map, (64,), lambda x, w, b: F.group_norm(x, 32, w, b),
                       lambda x, w, b: tf.group_norm(x, 32, w, b)),
    }
    for name, (shape, pshape, mine, theirs) in specs.items():
        ours, t_ours = zip(*(_pair(s, rng) for s in (shape, pshape, pshape)))
        np.testing.assert_allclose(mine(*ours).detach().numpy(), theirs(*t_ours).detach().numpy(), rtol=1e-4,
                                   atol=1e-4)
        g, t_g = minidl.ones(*shape), torch.ones(*shape)

        def forward(fn, grad_mode, leaves):
            with grad_mode():
                fn(*leaves)

        def step(fn, leaves, upstream):
            for t in leaves:
                t.grad = None
            fn(*leaves).backward(upstream)

        yield f"{name} forward", {"minidl": lambda fn=mine, x=ours: forward(fn, minidl.no_grad, x),
                                  "torch": lambda fn=theirs, x=t_ours: forward(fn, torch.no_grad, x)}
        yield f"{name} forward + backward", {"minidl": lambda fn=mine, x=ours, u=g: step(fn, x, u),
                                             "torch": lambda fn=theirs, x=t_ours, u=t_g: step(fn, x, u)}


def main(argv=None):
    parser = comparison_args(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    parser.add_argument("--rows", type=int, default=512, help="tokens (batch x sequence)")
    parser.add_argument("--features", type=int, default=768)
    parser.add_argument("--image", type=int, default=32, help="group norm's feature map side")
    args = parser.parse_args(argv)
    print_comparison(args, f"float32 tokens ({args.rows}, {args.features}), maps (8, 64, {args.image}, {args.image})",
                     cases(args.rows, args.features, args.image))


if __name__ == "__main__":
    main()
