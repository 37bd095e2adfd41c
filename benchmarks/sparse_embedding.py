"""Sparse against dense embedding gradients, minidl beside PyTorch: one training step of an
``Embedding(1_000_000, 64)`` + ``Linear(64, 1)`` model whose batch looks up 512 distinct rows, SGD.

    python benchmarks/sparse_embedding.py            # prints a markdown report
    python benchmarks/sparse_embedding.py --quick    # a short smoke run

Each of the four runs (minidl or torch, sparse=True or False) is its own process, one compute
thread, so that its peak resident memory is its own: the table alone is 256 MB of float32, a
dense gradient another 256 MB. Reported: the median step time (zero_grad, forward, backward,
step) over the timed steps, the bytes of the table's gradient after backward, and the process's
peak resident memory.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROWS, DIM, TOUCHED = 1_000_000, 64, 512


def one_run(lib_name, sparse, steps):
    """Time ``steps`` steps (after 3 warm-up steps) in this process; returns the measurements."""
    if lib_name == "torch":
        import torch as lib
        lib.set_num_threads(1)
    else:
        import minidl as lib
        lib.set_num_threads(1)
    lib.manual_seed(0)
    emb, lin = lib.nn.Embedding(ROWS, DIM, sparse=sparse), lib.nn.Linear(DIM, 1)
    opt = lib.optim.SGD(list(emb.parameters()) + list(lin.parameters()), lr=0.1)
    rs = np.random.RandomState(0)
    times = []
    for i in range(steps + 3):
        rows = lib.tensor(rs.choice(ROWS, TOUCHED, replace=False))
        target = lib.tensor(rs.randn(TOUCHED, 1).astype(np.float32))
        start = time.perf_counter()
        opt.zero_grad()
        loss = ((lin(emb(rows)) - target) ** 2).mean()
        loss.backward()
        grad = emb.weight.grad
        opt.step()
        if i >= 3:
            times.append(time.perf_counter() - start)
    if sparse:
        grad_bytes = grad._values().numel() * grad._values().element_size() + \
            grad._indices().numel() * grad._indices().element_size()
    else:
        grad_bytes = grad.numel() * grad.element_size()
    return {"ms": 1e3 * statistics.median(times), "grad_bytes": grad_bytes,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--one", nargs=2, metavar=("LIB", "SPARSE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    steps = 2 if args.quick else args.steps
    if args.one:
        print(json.dumps(one_run(args.one[0], args.one[1] == "sparse", steps)))
        return
    results = {}
    for lib_name in ("minidl", "torch"):
        for kind in ("sparse", "dense"):
            out = subprocess.run([sys.executable, __file__, "--one", lib_name, kind, "--steps", str(steps)],
                                 capture_output=True, text=True, check=True,
                                 env=dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1"))
            results[lib_name, kind] = json.loads(out.stdout.strip().splitlines()[-1])
    report(results, steps)


def report(results, steps):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    import minidl
    import torch
    print("## Sparse embedding gradients (`python benchmarks/sparse_embedding.py`)\n")
    print(f"- {time.strftime('%Y-%m-%d %H:%M')}; CPU: {cpu}, {os.cpu_count()} cores; one compute thread; "
          f"load average {os.getloadavg()[0]:.2f}; minidl {minidl.__version__}, torch {torch.__version__}")
    print(f"- Embedding({ROWS:,}, {DIM}) + Linear({DIM}, 1), float32, a batch of {TOUCHED} distinct rows, MSE, SGD "
          f"(lr 0.1); median of {steps} steps after 3 warm-up steps; each run in its own process\n")
    print("| library | gradient | ms/step | gradient bytes | peak RSS MB |")
    print("|---|---|---:|---:|---:|")
    for (lib_name, kind), r in results.items():
        print(f"| {lib_name} | {kind} | {r['ms']:.2f} | {r['grad_bytes']:,} | {r['peak_rss_mb']:.0f} |")
    print()
    for lib_name in ("minidl", "torch"):
        sparse, dense = results[lib_name, "sparse"], results[lib_name, "dense"]
        print(f"- {lib_name}: sparse is {dense['ms'] / sparse['ms']:.0f}x faster per step and its gradient "
              f"{dense['grad_bytes'] / sparse['grad_bytes']:.0f}x smaller")
    print(f"- minidl / torch per step: sparse {results['minidl', 'sparse']['ms'] / results['torch', 'sparse']['ms']:.2f}x, "
          f"dense {results['minidl', 'dense']['ms'] / results['torch', 'dense']['ms']:.2f}x")


if __name__ == "__main__":
    main()
