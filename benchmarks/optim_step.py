"""One optimizer step over a GPT-style parameter set: minidl's per-parameter path (foreach=False: one
fused launch per parameter) against its multi-tensor path (foreach=True, the default: one launch per
group's device and dtype), with torch's for-loop and foreach steps beside them on the same data.

    python benchmarks/optim_step.py [--threads 1] [--reps 200]

Parameter sets: the GPT benchmark's tiny and small models (token and position embeddings, per block two
LayerNorms, qkv/proj/fc/proj Linears with biases; weight decay 0.1 on the 2-D ones, as two groups), and
four big 1M-element matrices. Median ms per step.
"""
import argparse
import platform
import statistics
import time

import numpy as np

import minidl
import torch


def gpt_shapes(width, layers, vocab=65, block=64):
    shapes = [(vocab, width), (block, width)]
    for _ in range(layers):
        shapes += [(width,), (width,), (width, 3 * width), (3 * width,), (width, width), (width,),
                   (width,), (width,), (width, 4 * width), (4 * width,), (4 * width, width), (width,)]
    return shapes + [(width,), (width,)]


SETS = {"gpt-tiny (28 params, 0.1M)": gpt_shapes(64, 2), "gpt-small (52 params, 0.8M)": gpt_shapes(128, 4, block=128),
        "4 big (4 params, 4M)": [(1024, 1024)] * 4}


def build(lib, shapes, **flags):
    rng = np.random.default_rng(0)
    params = [lib.tensor(rng.standard_normal(s).astype(np.float32) * 0.02, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = lib.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32))
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return lib.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), **flags)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def median_ms(opt, reps):
    for _ in range(5):
        opt.step()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    minidl.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"AdamW step, {args.threads} thread(s), {cpu_model()}, torch {torch.__version__}")
    print(f"{'parameters':30} {'minidl loop':>12} {'minidl multi':>13} {'speed-up':>9} {'torch loop':>11} "
          f"{'torch foreach':>14}")
    for name, shapes in SETS.items():
        reps = max(10, args.reps // (20 if "big" in name else 1))
        loop = median_ms(build(minidl, shapes, foreach=False), reps)
        multi = median_ms(build(minidl, shapes, foreach=True), reps)
        tloop = median_ms(build(torch, shapes, foreach=False), reps)
        tforeach = median_ms(build(torch, shapes, foreach=True), reps)
        print(f"{name:30} {loop:10.3f}ms {multi:11.3f}ms {loop / multi:8.2f}x {tloop:9.3f}ms {tforeach:12.3f}ms")


if __name__ == "__main__":
    main()
