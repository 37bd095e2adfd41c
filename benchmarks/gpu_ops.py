"""Bandwidth of minidl's CUDA elementwise ops and reductions, against a device-to-device copy.

Each op runs through minidl's tensor API on device 'cuda' on 64M float32 elements (256 MiB per
operand): add and mul (two reads, one write), exp and relu (one read, one write), and sums of an
8192 x 8192 matrix over everything, over the last dim and over dim 0 (one read). Its bandwidth is
the bytes it must move divided by its time; the baseline is CuPy copying the same number of
bytes from one device buffer to another (one read, one write). Targets (issue 6 section 6):
elementwise >= 80% of the copy's bandwidth, reductions >= 60%.

Timing: CUDA events around ``--repeat`` back-to-back calls after ``--warmup`` calls; the median of
``--rounds`` such rounds. Usage::

    python benchmarks/gpu_ops.py            # on a GPU (needs CuPy: pip install cupy-cuda13x)
    python benchmarks/gpu_ops.py --sim      # smoke run: tiny sizes on the CUDA simulator, no GPU

Without a GPU (and without --sim) it exits with status 2 and says why.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

ELEMENTWISE_TARGET = 0.80
REDUCTION_TARGET = 0.60


def setup(sim: bool):
    """Device 'cuda' on the simulator or a real GPU; a GPU that is missing ends the script (status 2)."""
    import minidl.kernels.cuda.primitives  # noqa: F401  (registers the CUDA primitives)
    from minidl.kernels.cuda import runtime
    runtime.sim_enable(sim)
    try:
        return runtime.get()
    except runtime.Unavailable as e:
        print(f"{sys.argv[0]}: needs an NVIDIA GPU with CuPy ({e}); --sim runs a smoke test on the simulator",
              file=sys.stderr)
        sys.exit(2)


def banner(rt) -> str:
    """GPU model, CuPy and CUDA versions (or the simulator), for the log."""
    if rt.name == "sim":
        return "device: minidl CUDA simulator (CPU; timings mean nothing)"
    cupy = rt.cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]

    def version(v):
        return f"{v // 1000}.{v % 1000 // 10}"
    return (f"device: {name} ({props['totalGlobalMem'] / 2**30:.0f} GiB), CuPy {cupy.__version__}, CUDA runtime "
            f"{version(cupy.cuda.runtime.runtimeGetVersion())}, driver {version(cupy.cuda.runtime.driverGetVersion())}")


def timer(rt, fn, warmup: int, repeat: int, rounds: int) -> float:
    """Median seconds per call of ``fn``: CUDA events on a GPU, the wall clock on the simulator."""
    for _ in range(warmup):
        fn()
    rt.synchronize()
    times = []
    for _ in range(rounds):
        if rt.name == "sim":
            start = time.perf_counter()
            for _ in range(repeat):
                fn()
            times.append((time.perf_counter() - start) / repeat)
            continue
        begin, end = rt.cupy.cuda.Event(), rt.cupy.cuda.Event()
        begin.record()
        for _ in range(repeat):
            fn()
        end.record()
        end.synchronize()
        times.append(rt.cupy.cuda.get_elapsed_time(begin, end) / 1e3 / repeat)
    return statistics.median(times)


def cases(minidl, rows: int, cols: int):
    """(name, kind, bytes moved, call) for each op; operands made once, on 'cuda'."""
    n, item = rows * cols, 4
    x = minidl.rand(n, device="cuda")
    y = minidl.rand(n, device="cuda")
    m = x.reshape(rows, cols)
    return [
        ("add", "elementwise", 3 * n * item, lambda: x + y),
        ("mul", "elementwise", 3 * n * item, lambda: x * y),
        ("exp", "elementwise", 2 * n * item, lambda: x.exp()),
        ("relu", "elementwise", 2 * n * item, lambda: x.relu()),
        ("sum (all)", "reduction", n * item, lambda: m.sum()),
        ("sum (last dim)", "reduction", (n + rows) * item, lambda: m.sum(dim=-1)),
        ("sum (dim 0)", "reduction", (n + cols) * item, lambda: m.sum(dim=0)),
    ]


def copy_seconds(rt, n: int, args) -> float:
    """The baseline: one device buffer of n float32 copied into another by CuPy (numpy on the simulator)."""
    src, dst = rt.xp.ones(n, np.float32), rt.xp.empty(n, np.float32)
    return timer(rt, lambda: rt.xp.copyto(dst, src), args.warmup, args.repeat, args.rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim", action="store_true", help="tiny sizes on the CUDA simulator (a smoke test)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.sim:
        args.warmup, args.repeat, args.rounds = 1, 1, 1
    rt = setup(args.sim)
    import minidl
    rows = cols = 64 if args.sim else 8192  # 64M float32 on a GPU
    print(banner(rt))
    copy = copy_seconds(rt, rows * cols, args)
    copy_bw = 2 * rows * cols * 4 / copy / 1e9
    print(f"\n{rows * cols:,} float32; device-to-device copy: {copy * 1e3:.3f} ms, {copy_bw:.1f} GB/s\n")
    print("| op | ms | GB/s | of copy | target |")
    print("|---|---:|---:|---:|---|")
    verdicts = []
    for name, kind, nbytes, fn in cases(minidl, rows, cols):
        seconds = timer(rt, fn, args.warmup, args.repeat, args.rounds)
        bw = nbytes / seconds / 1e9
        target = ELEMENTWISE_TARGET if kind == "elementwise" else REDUCTION_TARGET
        met = bw / copy_bw >= target
        verdicts.append(met)
        print(f"| {name} | {seconds * 1e3:.3f} | {bw:.1f} | {bw / copy_bw:.0%} | >= {target:.0%}: "
              f"{'MET' if met else 'MISSED'} |")
    if rt.name == "sim":
        print("\n(simulator: the smoke run checks that every case runs; its numbers are not GPU figures)")
    else:
        print(f"\n{sum(verdicts)} of {len(verdicts)} targets met")


if __name__ == "__main__":
    main()
