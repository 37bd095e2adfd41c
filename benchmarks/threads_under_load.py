"""The digits CNN's training epoch in minidl beside PyTorch, on a quiet machine and under a background load.

A *load* of L is L processes of ours that spin a core each (``while True: pass``, started before and ended after
each measurement), so "load 6" means the same thing on every run. For each load, each configuration trains
examples/train_digits.py's CNN in a fresh process, ``--rounds`` times (the configurations taking turns): batches of
32 from each library's own DataLoader over the same 1,437 training digits, Adam, a warm-up epoch (kernels load),
then ``--epochs`` timed epochs; the figure is the median of all its timed epochs. Configurations: minidl with its
default threads, with ``set_num_threads(1)`` and ``(2)``, and with two threads and every matrix product given both
(``2-blas-always``: minidl before ``BLAS_PARALLEL_MIN``); torch with its default threads and with
``torch.set_num_threads(1)``. Single BLAS products are timed too, with 1 and 2 threads, at each load: they are what
``BLAS_PARALLEL_MIN`` was chosen from. The *slowdown* of a configuration at a load is its epoch time there over its
own time at load 0: the issue's target is minidl's default slowing down no more than torch's default does.

    python benchmarks/threads_under_load.py                   # loads 0, 2, 6; prints a markdown table
    python benchmarks/threads_under_load.py --loads 0 6 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# (m, k, n) of the BLAS products timed alone: the 1024x64 @ 64x192, and squares of growing size
PRODUCTS = [(1024, 64, 192), (128, 128, 128), (256, 256, 256), (512, 512, 512), (768, 768, 768),
            (1024, 1024, 1024), (1536, 1536, 1536)]
# "2-blas-always": two threads, and every product handed to BLAS with both (minidl before BLAS_PARALLEL_MIN, when
# OpenBLAS's own cut-off of 2^18 multiply-adds decided)
CONFIGS = [("minidl", "default"), ("minidl", "1"), ("minidl", "2"), ("minidl", "2-blas-always"), ("torch", "default"),
           ("torch", "1")]


def child(framework: str, threads: str, epochs: int) -> None:
    """Train and print one JSON line: each timed epoch's seconds and the thread counts in force."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np
    from threadpoolctl import threadpool_info

    from train_digits import make_model
    if framework == "torch":
        import torch as fw
        from torch.utils.data import DataLoader, TensorDataset
    else:
        import minidl as fw
        from minidl.utils.data import DataLoader, TensorDataset
    from minidl.vision.datasets import Digits
    if threads != "default":
        fw.set_num_threads(int(threads[0]))
    if threads == "2-blas-always":
        fw.threads.BLAS_PARALLEL_MIN = 0
    digits = Digits(train=True)  # as Digits' __getitem__ scales them, for both libraries at once
    images = fw.from_numpy(digits.data[:, None].astype(np.float32) / np.float32(16.0))
    labels = fw.from_numpy(digits.targets.astype(np.int64))
    fw.manual_seed(0)
    loader = DataLoader(TensorDataset(images, labels), batch_size=32, shuffle=True)
    model = make_model("cnn", fw.nn)
    optimizer = fw.optim.Adam(model.parameters(), lr=3e-3)

    def epoch() -> float:
        began = time.perf_counter()
        for x, y in loader:
            loss = fw.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return time.perf_counter() - began

    epoch()  # warm-up: kernels load or compile, allocators settle
    times = [epoch() for _ in range(epochs)]
    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] in ("blas", "openmp")]
    print(json.dumps({"times": times, "threads": fw.get_num_threads(), "pools": blas}))


def products_child() -> None:
    """Print one JSON line: the median seconds of each PRODUCTS entry through numpy's BLAS with 1 and 2 threads."""
    import numpy as np
    from threadpoolctl import threadpool_limits
    rs = np.random.RandomState(0)
    result = {}
    for m, k, n in PRODUCTS:
        a, b = rs.randn(m, k).astype(np.float32), rs.randn(k, n).astype(np.float32)
        for threads in (1, 2):
            with threadpool_limits(threads, user_api="blas"):
                a @ b
                repeats = max(3, int(0.02 / max(1e-6, _seconds(lambda: a @ b))))
                result[f"{m}x{k}x{n}/{threads}"] = statistics.median(_seconds(lambda: a @ b) for _ in range(repeats))
    print(json.dumps(result))


def _seconds(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def start_load(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs: list) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def measure(framework: str, threads: str = "default", epochs: int = 0) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", framework, "--threads", threads, "--epochs",
                          str(epochs)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT),
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        line = next(l for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                    if l.startswith("Model name"))
        return line.split(":", 1)[1].strip()
    except (OSError, StopIteration):
        return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, nargs="+", default=[0, 2, 6])
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per process")
    parser.add_argument("--rounds", type=int, default=3, help="processes per configuration and load")
    parser.add_argument("--child", choices=["minidl", "torch", "products"], help=argparse.SUPPRESS)
    parser.add_argument("--threads", default="default", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "products":
        return products_child()
    if args.child:
        return child(args.child, args.threads, args.epochs)
    if 0 not in args.loads:
        parser.error("--loads must include 0: slowdowns are relative to the quiet time")
    print(f"{cpu_model()}, {os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.2f}", flush=True)
    results, products = {}, {}
    for load in sorted(args.loads):
        procs = start_load(load)
        try:
            time.sleep(1.0 if load else 0.0)  # the spinners reach the run queue
            products[load] = measure("products")
            print(f"load {load}: products {products[load]}", flush=True)
            times = {config: [] for config in CONFIGS}
            for round_ in range(args.rounds):   # (the order turns each round: drift hits every configuration)
                shift = round_ % len(CONFIGS)
                for framework, threads in CONFIGS[shift:] + CONFIGS[:shift]:
                    r = measure(framework, threads, args.epochs)
                    times[framework, threads] += r["times"]
                    epochs = [round(t, 3) for t in r["times"]]
                    print(f"load {load}, round {round_}: {framework:6s} threads {threads:13s} (in force: "
                          f"{r['threads']}, pools {r['pools']}): epochs {epochs}", flush=True)
            for (framework, threads), found in times.items():
                results[framework, threads, load] = statistics.median(found)
        finally:
            stop_load(procs)
    loads = sorted(args.loads)
    print("\n| configuration | " + " | ".join(f"load {l}: epoch (slowdown)" for l in loads) + " |")
    print("|---|" + "---|" * len(loads))
    for framework, threads in CONFIGS:
        quiet = results[framework, threads, 0]
        cells = [f"{results[framework, threads, l]:.2f} s ({results[framework, threads, l] / quiet:.1f}x)"
                 for l in loads]
        print(f"| {framework}, threads {threads} | " + " | ".join(cells) + " |")
    print("\n| product (m x k x n) | " + " | ".join(f"load {l}: 1 thread / 2 threads (ms)" for l in loads) + " |")
    print("|---|" + "---|" * len(loads))
    for m, k, n in PRODUCTS:
        key = f"{m}x{k}x{n}"
        cells = [f"{products[l][key + '/1'] * 1e3:.2f} / {products[l][key + '/2'] * 1e3:.2f}" for l in loads]
        print(f"| {key} ({m * k * n / 2 ** 20:.0f} Mi multiply-adds) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
