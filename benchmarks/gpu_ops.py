"""minidl's CUDA ops beside PyTorch CUDA, in the same run: bandwidth against a device-to-device copy,
time per call, and the cost of launching a tiny op.

Every op runs through the tensor API of each library on the same data (copied from numpy to both):

- elementwise, contiguous (copy_, add, mul, exp, relu on 64M float32, 256 MiB an operand), strided (an
  operand transposed, a transposing copy, every other column) and broadcast (a row, a column);
- reductions of an 8192 x 8192 matrix (sum over everything, the last dim, dim 0; amax over the last dim),
  softmax over the last dim, indexing (rows picked by an index, ``gather`` along dim 1);
- conv2d (3x3, 64 -> 64 channels, batch 32 of 56 x 56) and argsort (rows of 512, one row of 2^24).

Bandwidth is the bytes an op must move (each input read once, the output written once) over its time,
and its share of the bandwidth of CuPy copying one buffer to another. Targets (issue 41): elementwise >=
80% of the copy contiguous, >= 50% strided; reductions >= 60%. Each case also says how far minidl's output
is from torch's (‖minidl − torch‖ / ‖torch‖; torch's conv may use TF32, so ~1e-3 there is expected).

The launch table times a tiny op (1024 elements) issued back to back: host µs per call (the host's clock
around the calls, which do not wait for the GPU) and device µs per call (CUDA events), for minidl, torch
and a bare CuPy call (the floor of a Python launch).

Timing: CUDA events around ``--repeat`` back-to-back calls after ``--warmup`` calls; the median of
``--rounds`` rounds, the libraries taking turns case by case. Usage::

    python benchmarks/gpu_ops.py            # on a GPU (needs CuPy: pip install cupy-cuda13x; torch optional)
    python benchmarks/gpu_ops.py --sim      # smoke run: tiny sizes on the CUDA simulator, no GPU, no torch

Without a GPU (and without --sim) it exits with status 2 and says why.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

TARGETS = {"contiguous": 0.80, "strided": 0.50, "reduction": 0.60}
FULL = dict(rows=8192, cols=8192, conv=(32, 64, 56), sort_rows=(16384, 512), sort_long=1 << 24, tiny=1024)
SIM = dict(rows=64, cols=64, conv=(1, 4, 6), sort_rows=(8, 64), sort_long=4096, tiny=64)


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


def torch_cuda():
    """torch, when it is installed with CUDA and sees a GPU; else None."""
    try:
        import torch
    except Exception:  # noqa: BLE001  (not installed or broken: no torch column)
        return None
    return torch if torch.cuda.is_available() else None


def banner(rt, torch=None) -> str:
    """GPU model, CuPy, CUDA and torch versions (or the simulator), for the log."""
    if rt.name == "sim":
        return "device: minidl CUDA simulator (CPU; timings mean nothing)"
    cupy = rt.cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]

    def version(v):
        return f"{v // 1000}.{v % 1000 // 10}"
    torch_line = (f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})"
                  if torch is not None else "PyTorch CUDA: not available, minidl only")
    return (f"device: {name} ({props['totalGlobalMem'] / 2**30:.0f} GiB), CuPy {cupy.__version__}, CUDA runtime "
            f"{version(cupy.cuda.runtime.runtimeGetVersion())}, driver {version(cupy.cuda.runtime.driverGetVersion())}"
            f"\n{torch_line}")


def timer(lib, fn, warmup: int, repeat: int, rounds: int) -> tuple[float, float]:
    """(device, host) seconds per call of ``fn``, medians over rounds: the device's by ``lib``'s CUDA events
    (minidl and torch share the API), the host's by its clock around the calls, which do not wait."""
    for _ in range(warmup):
        fn()
    lib.cuda.synchronize()
    device, host = [], []
    for _ in range(rounds):
        begin, end = lib.cuda.Event(enable_timing=True), lib.cuda.Event(enable_timing=True)
        begin.record()
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        host.append((time.perf_counter() - started) / repeat)
        end.record()
        end.synchronize()
        device.append(begin.elapsed_time(end) / 1e3 / repeat)
    return statistics.median(device), statistics.median(host)


def data(sizes: dict) -> dict:
    """The numpy inputs every library gets a copy of."""
    rng = np.random.default_rng(0)
    rows, cols = sizes["rows"], sizes["cols"]
    batch, channels, side = sizes["conv"]
    f32 = np.float32
    return dict(
        m=rng.random((rows, cols), f32), m2=rng.random((rows, cols), f32), row=rng.random(cols, f32),
        col=rng.random((rows, 1), f32), pick=rng.integers(0, rows, rows // 2),
        along=rng.integers(0, cols, (rows, cols // 4)),
        image=rng.standard_normal((batch, channels, side, side), f32),
        weight=rng.standard_normal((channels, channels, 3, 3), f32) / (3 * channels ** 0.5),
        sort_rows=rng.random(sizes["sort_rows"], f32), sort_long=rng.random(sizes["sort_long"], f32))


def cases(lib, arrays: dict) -> list:
    """(group, name, bytes moved or None, flop or None, call) for ``lib``, on its copies of the inputs."""
    t = {k: lib.from_numpy(v).to("cuda") for k, v in arrays.items()}
    m, m2, F = t["m"], t["m2"], lib.nn.functional
    n, rows, cols, f = m.numel(), m.shape[0], m.shape[1], 4
    dst = lib.empty_like(m)
    half = m[:, ::2]
    picked, along = t["pick"].numel(), t["along"].numel()
    batch, channels, side = t["image"].shape[:3]
    conv_flop = 2 * batch * channels * channels * 9 * side * side
    return [
        ("contiguous", "copy_", 2 * n * f, None, lambda: dst.copy_(m)),
        ("contiguous", "add", 3 * n * f, None, lambda: m + m2),
        ("contiguous", "mul", 3 * n * f, None, lambda: m * m2),
        ("contiguous", "exp", 2 * n * f, None, lambda: m.exp()),
        ("contiguous", "relu", 2 * n * f, None, lambda: m.relu()),
        ("strided", "add, b transposed", 3 * n * f, None, lambda: m + m2.t()),
        ("strided", "contiguous() of a transpose", 2 * n * f, None, lambda: m.t().contiguous()),
        ("strided", "exp of every other column", n * f, None, lambda: half.exp()),
        ("broadcast", "add a row", (2 * n + cols) * f, None, lambda: m + t["row"]),
        ("broadcast", "mul a column", (2 * n + rows) * f, None, lambda: m * t["col"]),
        ("reduction", "sum (all)", n * f, None, lambda: m.sum()),
        ("reduction", "sum (last dim)", (n + rows) * f, None, lambda: m.sum(dim=-1)),
        ("reduction", "sum (dim 0)", (n + cols) * f, None, lambda: m.sum(dim=0)),
        ("reduction", "amax (last dim)", (n + rows) * f, None, lambda: m.amax(dim=-1)),
        ("softmax", "softmax (last dim)", 2 * n * f, None, lambda: F.softmax(m, dim=-1)),
        ("indexing", "rows m[idx]", (2 * picked * cols * f + picked * 8), None, lambda: m[t["pick"]]),
        ("indexing", "gather(1, idx)", along * (2 * f + 8), None, lambda: m.gather(1, t["along"])),
        ("conv", "conv2d 3x3", None, conv_flop, lambda: F.conv2d(t["image"], t["weight"], padding=1)),
        ("argsort", "argsort rows", None, None, lambda: t["sort_rows"].argsort(dim=-1, stable=True)),
        ("argsort", "argsort one long row", None, None, lambda: t["sort_long"].argsort(stable=True)),
    ]


def rel_error(ours, theirs) -> float:
    a, b = ours.cpu().numpy(), theirs.cpu().numpy()
    if a.dtype.kind != "f":
        a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))


def copy_bandwidth(rt, n: int, args) -> float:
    """Bytes per second (read + write) of CuPy copying n float32 from one device buffer to another."""
    if rt.name == "sim":
        return 2 * n * 4 / 1e-3  # a stand-in: the simulator's figures mean nothing
    cupy = rt.cupy
    src, dst = cupy.ones(n, np.float32), cupy.empty(n, np.float32)
    seconds = timer(CupyTimingLib(cupy), lambda: cupy.copyto(dst, src), args.warmup, args.repeat, args.rounds)[0]
    return 2 * n * 4 / seconds


def rate(nbytes, flop, seconds: float) -> str:
    """GB/s of a memory-bound case, TFLOP/s of a compute-bound one."""
    return f"{nbytes / seconds / 1e9:.0f}" if nbytes else f"{flop / seconds / 1e12:.1f} TFLOP/s" if flop else "-"


def verdict(group: str, share: float | None) -> str:
    target = TARGETS.get(group)
    if target is None or share is None:
        return "-"
    return f">= {target:.0%}: {'MET' if share >= target else 'MISSED'}"


def ops_table(libs: dict, arrays: dict, copy_bw: float, args) -> tuple[list, list]:
    """Prints one row per case; returns the verdicts that have a target and the names of the cases that failed."""
    built = {name: cases(lib, arrays) for name, lib in libs.items()}
    print("| group | op | minidl ms | GB/s | of copy | host µs/call | torch ms | torch GB/s | minidl / torch "
          "| rel. diff from torch | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    verdicts, failed = [], []
    for i, case in enumerate(built["minidl"]):
        try:
            verdicts += row(libs, case, built["torch"][i][4] if "torch" in built else None, copy_bw, args)
        except Exception as e:  # noqa: BLE001  (one failing case must not hide the others' figures)
            failed.append(case[1])
            print(f"| {case[0]} | {case[1]} | FAILED: {type(e).__name__}: {str(e)[:300]} |")
    return verdicts, failed


def row(libs: dict, case: tuple, fn_t, copy_bw: float, args) -> list:
    """Times one case on each library and prints its row; returns its verdict, if it has a target."""
    group, name, nbytes, flop, fn = case
    ours, host = timer(libs["minidl"], fn, args.warmup, args.repeat, args.rounds)
    share = nbytes / ours / copy_bw if nbytes else None
    theirs = ratio = err = rate_t = "-"
    if fn_t is not None:
        seconds = timer(libs["torch"], fn_t, args.warmup, args.repeat, args.rounds)[0]
        theirs, ratio, rate_t = f"{seconds * 1e3:.3f}", f"{ours / seconds:.2f}x", rate(nbytes, flop, seconds)
        err = f"{rel_error(fn(), fn_t()):.1e}"
    print(f"| {group} | {name} | {ours * 1e3:.3f} | {rate(nbytes, flop, ours)} | "
          f"{'-' if share is None else f'{share:.0%}'} | {host * 1e6:.1f} | {theirs} | {rate_t} | {ratio} | {err} | "
          f"{verdict(group, share)} |")
    return [share >= TARGETS[group]] if group in TARGETS else []


def launch_table(rt, libs: dict, size: int, args) -> None:
    """Host and device µs per call of tiny ops issued back to back (device ≈ host when the host is the limit)."""
    rng = np.random.default_rng(1)
    a, b = rng.random(size, np.float32), rng.random(size, np.float32)
    calls = {}
    for name, lib in libs.items():
        x, y = lib.from_numpy(a).to("cuda"), lib.from_numpy(b).to("cuda")
        calls[name] = (lib, {"add": lambda x=x, y=y: x + y, "exp": lambda x=x: x.exp(), "sum": lambda x=x: x.sum()})
    if rt.name != "sim":
        x, y = rt.cupy.asarray(a), rt.cupy.asarray(b)
        calls["cupy"] = (CupyTimingLib(rt.cupy), {"add": lambda: x + y, "exp": lambda: rt.cupy.exp(x),
                                                  "sum": lambda: x.sum()})
    print(f"\n{size} float32 elements, {args.launch_calls} calls back to back (µs per call)\n")
    print("| op | " + " | ".join(f"{name} host | {name} device" for name in calls) + " |")
    print("|---|" + "---:|---:|" * len(calls))
    for op in ("add", "exp", "sum"):
        cells = []
        for lib, fns in calls.values():
            device, host = timer(lib, fns[op], args.warmup, args.launch_calls, args.rounds)
            cells.append(f"{host * 1e6:.1f} | {device * 1e6:.1f}")
        print(f"| {op} | " + " | ".join(cells) + " |")


class CupyTimingLib:
    """CuPy behind the two calls ``timer`` makes of a library: ``cuda.synchronize`` and ``cuda.Event``."""

    def __init__(self, cupy):
        self.cuda = self
        self._cupy = cupy

    def synchronize(self):
        self._cupy.cuda.Device().synchronize()

    def Event(self, enable_timing=True):  # noqa: N802  (torch's name)
        return CupyEvent(self._cupy)


class CupyEvent:
    def __init__(self, cupy):
        self._cupy, self._event = cupy, cupy.cuda.Event()

    def record(self):
        self._event.record()

    def synchronize(self):
        self._event.synchronize()

    def elapsed_time(self, end):
        return self._cupy.cuda.get_elapsed_time(self._event, end._event)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim", action="store_true", help="tiny sizes on the CUDA simulator (a smoke test)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--launch-calls", type=int, default=2000, help="tiny-op calls per round")
    args = parser.parse_args()
    sizes = SIM if args.sim else FULL
    if args.sim:
        args.warmup, args.repeat, args.rounds, args.launch_calls = 1, 1, 1, 2
    rt = setup(args.sim)
    import minidl
    libs = {"minidl": minidl}
    torch = None if args.sim else torch_cuda()
    if torch is not None:
        libs["torch"] = torch
    print(banner(rt, torch))
    n = sizes["rows"] * sizes["cols"]
    copy_bw = copy_bandwidth(rt, n, args)
    print(f"\n{n:,} float32 a matrix; CuPy's device-to-device copy: {copy_bw / 1e9:.1f} GB/s\n")
    verdicts, failed = ops_table(libs, data(sizes), copy_bw, args)
    launch_table(rt, libs, sizes["tiny"], args)
    if rt.name == "sim":
        print("\n(simulator: the smoke run checks that every case runs; its numbers are not GPU figures)")
    else:
        print(f"\n{sum(verdicts)} of {len(verdicts)} targets met")
    if failed:
        sys.exit(f"{sys.argv[0]}: {len(failed)} case(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
