"""Benchmark minidl's elementwise ops beside numpy and PyTorch, measured in the same run.

Two questions, one table each:

1. **Per-op overhead on small tensors.** 16x16 float32 ``a * b`` then ``+ c``, forward only and
   forward+backward (``(a * b + c).sum().backward()`` on ``requires_grad`` leaves). For tensors this
   small the arithmetic is a few hundred flops, so the time is almost all framework overhead:
   argument checks, dtype promotion, allocating the result, building the autograd node, and the
   kernel launch. Target: no more than 3x PyTorch's time.
2. **Throughput on large tensors** in GB/s = (bytes read + bytes written) / time, counting each
   logical element once (a stride-2 read is charged 4 bytes per element used, not the cache
   lines it drags in). Contiguous ops (16M float32 ``a + b``, ``a * 2.0``, ``exp``) and strided ones
   (``a.t() + b`` on 4096x4096, every-other-element slices, negative-step slices). Target for the
   contiguous ones: at least 0.8x numpy's throughput.

Method: every case is warmed up first (this also triggers Numba compilation), then timed as
several trials of many back-to-back calls; the reported time is the median over trials of the
per-call mean. The libraries take turns trial by trial, so background load spreads evenly.
The garbage collector stays on, since real programs pay for it too. All results of one run come
from the same process, so the columns are comparable with each other; numbers from different
runs or machines are not.

Usage::

    python benchmarks/bench_ops.py            # full run (one to two minutes on 2 cores)
    python benchmarks/bench_ops.py --quick    # short smoke run: smaller sizes, fewer trials
    python benchmarks/bench_ops.py --json results.json   # also save the raw numbers
    python benchmarks/bench_ops.py --threads 1  # minidl and torch on one thread each, like numpy

The machine should be otherwise idle: on a 2-core box, a multi-threaded kernel whose second thread
is descheduled by some other process waits for it at the end of the parallel loop, which can cost
milliseconds per call. The report prints the load average at the start and end of the run.

The PyTorch columns (and the overhead target, which is relative to PyTorch) are left out when
``import torch`` fails.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import numpy as np

import minidl

try:
    import torch
except Exception:  # noqa: BLE001  (not installed, or broken: run without the torch columns)
    torch = None

T0 = time.perf_counter()
OVERHEAD_TARGET = 3.0      # minidl time / torch time, at most
THROUGHPUT_TARGET = 0.8    # minidl GB/s / numpy GB/s, at least (contiguous cases)


# ----------------------------------------------------------------------------- timing
def _calibrate(fn, min_trial_s: float) -> int:
    """Calls per trial so that one trial of ``fn`` lasts about ``min_trial_s`` (after a warm-up)."""
    for _ in range(3):          # warm-up: compile kernels, fill caches, fault in pages
        fn()
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_trial_s or number >= 1 << 20:
            return number
        number *= 2 if elapsed <= 0 else max(2, min(10, int(min_trial_s / elapsed) + 1))


def measure(fns: dict, trials: int, min_trial_s: float) -> dict:
    """{library: median over ``trials`` of the mean seconds per call}.

    The libraries take turns, one trial each per round, so that a burst of background load
    lands on every column alike instead of spoiling one library's numbers.
    """
    numbers = {lib: _calibrate(fn, min_trial_s) for lib, fn in fns.items()}
    per_call = {lib: [] for lib in fns}
    gc.collect()                # leave no garbage from earlier cases to be collected in these trials
    for _ in range(trials):
        for lib, fn in fns.items():
            number = numbers[lib]
            start = time.perf_counter()
            for _ in range(number):
                fn()
            per_call[lib].append((time.perf_counter() - start) / number)
    return {lib: statistics.median(times) for lib, times in per_call.items()}


def comparison_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of a one-op comparison script (activations.py, norms.py, ...): threads and trials."""
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trials", type=int, default=7)
    return parser


def print_comparison(args, setting: str, cases, unit: str = "ms") -> None:
    """Time each (name, {"minidl": fn, "torch": fn}) of ``cases`` with ``measure`` on ``args.threads`` threads and
    print a table of both libraries and their ratio, under a line naming the machine, torch and ``setting``."""
    from _bench_common import cpu_model
    minidl.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, {args.threads} thread(s), torch {torch.__version__}, {setting}; "
          f"load average {os.getloadavg()}")
    scale, digits = {"ms": (1e3, 3), "µs": (1e6, 0)}[unit]
    print(f"| case | minidl {unit} | torch {unit} | minidl / torch |\n|---|---:|---:|---:|")
    for name, fns in cases:
        times = measure(fns, args.trials, 0.2)
        print(f"| {name} | {times['minidl'] * scale:.{digits}f} | {times['torch'] * scale:.{digits}f} | "
              f"{times['minidl'] / times['torch']:.2f} |")


# ----------------------------------------------------------------------------- small tensors
def small_cases():
    """(name, ops per call, {library: callable}) for the overhead table."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((16, 16), dtype=np.float32) for _ in range(3)]
    na, nb, nc = arrays
    ma, mb, mc = (minidl.tensor(x) for x in arrays)
    ga, gb, gc_ = (minidl.tensor(x, requires_grad=True) for x in arrays)

    def md_step():
        (ga * gb + gc_).sum().backward()

    cases = [
        ("`a * b`", 1, {"minidl": lambda: ma * mb, "numpy": lambda: na * nb}),
        ("`a * b + c`", 2, {"minidl": lambda: ma * mb + mc, "numpy": lambda: na * nb + nc}),
        ("`(a * b + c).sum().backward()`", 3, {"minidl": md_step}),
    ]
    if torch is not None:
        ta, tb, tc = (torch.from_numpy(x.copy()) for x in arrays)
        tga, tgb, tgc = (torch.from_numpy(x.copy()).requires_grad_() for x in arrays)

        def torch_step():
            (tga * tgb + tgc).sum().backward()

        cases[0][2]["torch"] = lambda: ta * tb
        cases[1][2]["torch"] = lambda: ta * tb + tc
        cases[2][2]["torch"] = torch_step
    # sanity: the libraries compute the same numbers
    np.testing.assert_allclose((ma * mb + mc).numpy(), na * nb + nc, rtol=1e-6)
    md_step()
    np.testing.assert_allclose(ga.grad.numpy(), nb, rtol=1e-6)
    return cases


def run_small(trials, min_trial_s):
    rows = []
    for name, ops, fns in small_cases():
        times = {lib: t * 1e6 for lib, t in measure(fns, trials, min_trial_s).items()}
        ratio = times["minidl"] / times["torch"] if "torch" in times else None
        rows.append({"case": name, "ops": ops, "us": times, "ratio_vs_torch": ratio,
                     "target_met": None if ratio is None else ratio <= OVERHEAD_TARGET})
        print(f"  [{time.perf_counter() - T0:6.1f} s] measured {name}", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- large tensors
def large_cases(n: int, side: int):
    """(name, kind, bytes moved, {library: callable}) for the throughput table.

    ``n`` elements for the 1-D cases, ``side`` x ``side`` for the transpose case.
    """
    rng = np.random.default_rng(1)
    item = 4
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    a2 = rng.standard_normal(2 * n, dtype=np.float32)    # for the every-other-element case
    b2 = rng.standard_normal(2 * n, dtype=np.float32)
    sq_a = rng.standard_normal((side, side), dtype=np.float32)
    sq_b = rng.standard_normal((side, side), dtype=np.float32)
    ma, mb, ma2, mb2 = (minidl.from_numpy(x) for x in (a, b, a2, b2))
    msq_a, msq_b = minidl.from_numpy(sq_a), minidl.from_numpy(sq_b)
    sq_n = side * side

    cases = [
        ("`a + b`", "contiguous", 3 * n * item,
         {"minidl": lambda: ma + mb, "numpy": lambda: a + b}),
        ("`a * 2.0`", "contiguous", 2 * n * item,
         {"minidl": lambda: ma * 2.0, "numpy": lambda: a * 2.0}),
        ("`exp(a)`", "contiguous", 2 * n * item,
         {"minidl": lambda: ma.exp(), "numpy": lambda: np.exp(a)}),
        (f"`a.t() + b` ({side}x{side})", "strided", 3 * sq_n * item,
         {"minidl": lambda: msq_a.t() + msq_b, "numpy": lambda: sq_a.T + sq_b}),
        ("`a[::2] + b[::2]`", "strided", 3 * n * item,
         {"minidl": lambda: ma2[::2] + mb2[::2], "numpy": lambda: a2[::2] + b2[::2]}),
        ("`a[::-1] + b`", "strided", 3 * n * item,
         {"minidl": lambda: ma[::-1] + mb, "numpy": lambda: a[::-1] + b}),
    ]
    if torch is not None:
        ta, tb, ta2, tb2 = (torch.from_numpy(x.copy()) for x in (a, b, a2, b2))
        tsq_a, tsq_b = torch.from_numpy(sq_a.copy()), torch.from_numpy(sq_b.copy())
        cases[0][3]["torch"] = lambda: ta + tb
        cases[1][3]["torch"] = lambda: ta * 2.0
        cases[2][3]["torch"] = lambda: torch.exp(ta)
        cases[3][3]["torch"] = lambda: tsq_a.t() + tsq_b
        cases[4][3]["torch"] = lambda: ta2[::2] + tb2[::2]
        # PyTorch has no negative strides (a[::-1] raises; flip() copies), so no torch entry
    # sanity: minidl and numpy agree on every case
    for name, _, _, fns in cases:
        got, want = np.asarray(fns["minidl"]()), fns["numpy"]()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    return cases


def run_large(n, side, trials, min_trial_s):
    rows = []
    for name, kind, nbytes, fns in large_cases(n, side):
        secs = measure(fns, trials, min_trial_s)
        gbps = {lib: nbytes / s / 1e9 for lib, s in secs.items()}
        ratio = gbps["minidl"] / gbps["numpy"]
        rows.append({"case": name, "kind": kind, "bytes": nbytes, "ms": {k: v * 1e3 for k, v in secs.items()},
                     "gbps": gbps, "ratio_vs_numpy": ratio,
                     "ratio_vs_torch": gbps["minidl"] / gbps["torch"] if "torch" in gbps else None,
                     "target_met": ratio >= THROUGHPUT_TARGET if kind == "contiguous" else None})
        print(f"  [{time.perf_counter() - T0:6.1f} s] measured {name}", file=sys.stderr)
    return rows


def run_sweep(sizes, trials, min_trial_s):
    """``a + b`` across sizes: where the per-call overhead stops mattering, and where threads start."""
    rows = []
    rng = np.random.default_rng(2)
    for n in sizes:
        a = rng.standard_normal(n, dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        ma, mb = minidl.from_numpy(a), minidl.from_numpy(b)
        fns = {"minidl": lambda ma=ma, mb=mb: ma + mb, "numpy": lambda a=a, b=b: a + b}
        if torch is not None:
            ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
            fns["torch"] = lambda ta=ta, tb=tb: ta + tb
        rows.append({"n": n, "us": {lib: t * 1e6 for lib, t in measure(fns, trials, min_trial_s).items()}})
    print(f"  [{time.perf_counter() - T0:6.1f} s] measured size sweep", file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------- report
def _fmt(x, digits=2, na="n/a"):
    return na if x is None else f"{x:.{digits}f}"


def _verdict(ok):
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def machine_info() -> dict:
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], check=False, capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass                    # no lscpu: keep platform's answer
    import numba
    info = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "cpu": model,
        "cores": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "minidl": minidl.__version__,
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.get_num_threads(),
        "torch": None if torch is None else torch.__version__,
        "torch_threads": None if torch is None else torch.get_num_threads(),
    }
    return info


def _table(header, rows):
    """A markdown table; ``header`` is a list of (title, align) with align '<' or '>'."""
    out = ["| " + " | ".join(title for title, _ in header) + " |",
           "|" + "|".join("---:" if align == ">" else "---" for _, align in header) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in rows]
    return out


def report(info, small, large, sweep) -> str:
    has_torch = info["torch"] is not None
    lines = ["## Machine", ""]
    lines.append(f"- date: {info['date']}; CPU: {info['cpu']}, {info['cores']} cores "
                 f"(1-min load average at start / end: {info['load_average_1m']} / {info['load_average_1m_end']})")
    lines.append(f"- Python {info['python']}, minidl {info['minidl']}, numpy {info['numpy']}, "
                 f"numba {info['numba']} (threads: {info['numba_threads']}), "
                 + (f"torch {info['torch']} (threads: {info['torch_threads']})" if has_torch
                    else "torch not installed (torch columns left out)"))

    lines += ["", "## Per-op overhead, 16x16 float32 (microseconds per call, median of trials)", ""]
    header = [("case", "<"), ("ops", ">"), ("minidl µs", ">"), ("numpy µs", ">")]
    if has_torch:
        header += [("torch µs", ">")]
    header += [("minidl µs/op", ">")]
    if has_torch:
        header += [("torch µs/op", ">"), ("minidl / torch", ">"), (f"target ≤ {OVERHEAD_TARGET:g}x", "<")]
    rows = []
    for r in small:
        us = r["us"]
        cells = [r["case"], str(r["ops"]), _fmt(us["minidl"]), _fmt(us.get("numpy"))]
        if has_torch:
            cells += [_fmt(us["torch"])]
        cells += [_fmt(us["minidl"] / r["ops"])]
        if has_torch:
            cells += [_fmt(us["torch"] / r["ops"]), f"{r['ratio_vs_torch']:.2f}x", _verdict(r["target_met"])]
        rows.append(cells)
    lines += _table(header, rows)
    lines += ["", ("ops = forward ops per call (the backward row runs mul, add, sum forward, then their "
                   "three backward nodes and the leaf accumulations).")]

    lines += ["", "## Throughput, float32 (GB/s = logical bytes read + written / time; higher is better)", ""]
    header = [("case", "<"), ("kind", "<"), ("MB moved", ">"), ("minidl GB/s", ">"), ("numpy GB/s", ">")]
    if has_torch:
        header += [("torch GB/s", ">")]
    header += [("minidl / numpy", ">")]
    if has_torch:
        header += [("minidl / torch", ">")]
    header += [(f"target ≥ {THROUGHPUT_TARGET:g}x numpy", "<")]
    rows = []
    for r in large:
        g = r["gbps"]
        cells = [r["case"], r["kind"], f"{r['bytes'] / 1e6:.0f}", _fmt(g["minidl"], 1), _fmt(g["numpy"], 1)]
        if has_torch:
            cells += [_fmt(g.get("torch"), 1, "n/a (no negative strides)" if "::-1" in r["case"] else "n/a")]
        cells += [f"{r['ratio_vs_numpy']:.2f}x"]
        if has_torch:
            cells += ["n/a" if r["ratio_vs_torch"] is None else f"{r['ratio_vs_torch']:.2f}x"]
        cells += [_verdict(r["target_met"])]
        rows.append(cells)
    lines += _table(header, rows)

    if sweep:
        lines += ["", "## `a + b` across sizes, float32 (microseconds per call)", ""]
        header = [("elements", ">"), ("minidl µs", ">"), ("numpy µs", ">")]
        if has_torch:
            header += [("torch µs", ">")]
        header += [("minidl / numpy", ">")]
        rows = []
        for r in sweep:
            us = r["us"]
            cells = [f"{r['n']:,}", _fmt(us["minidl"], 1), _fmt(us["numpy"], 1)]
            if has_torch:
                cells += [_fmt(us["torch"], 1)]
            cells += [f"{us['minidl'] / us['numpy']:.2f}x"]
            rows.append(cells)
        lines += _table(header, rows)

    overhead_ok = [r["target_met"] for r in small if r["target_met"] is not None]
    tput_ok = [r["target_met"] for r in large if r["target_met"] is not None]
    lines += ["", "## Targets", ""]
    if overhead_ok:
        worst = max(r["ratio_vs_torch"] for r in small if r["ratio_vs_torch"] is not None)
        lines.append(f"- per-op overhead ≤ {OVERHEAD_TARGET:g}x PyTorch: "
                     f"{'MET' if all(overhead_ok) else 'MISSED'} ({sum(overhead_ok)}/{len(overhead_ok)} cases "
                     f"within target; worst {worst:.2f}x)")
    else:
        lines.append(f"- per-op overhead ≤ {OVERHEAD_TARGET:g}x PyTorch: not checked (PyTorch not installed)")
    worst = min(r["ratio_vs_numpy"] for r in large if r["kind"] == "contiguous")
    lines.append(f"- large contiguous elementwise ≥ {THROUGHPUT_TARGET:g}x numpy: "
                 f"{'MET' if all(tput_ok) else 'MISSED'} ({sum(tput_ok)}/{len(tput_ok)} cases within target; "
                 f"worst {worst:.2f}x)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run: smaller sizes, fewer and shorter trials")
    parser.add_argument("--json", metavar="PATH", help="also write the raw results to PATH as JSON")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="run minidl (Numba + BLAS) and torch on N threads (default: each library's own "
                             "default; numpy's elementwise ops are single-threaded either way)")
    args = parser.parse_args(argv)
    if args.threads:
        minidl.set_num_threads(args.threads)
        if torch is not None:
            torch.set_num_threads(args.threads)

    if args.quick:
        n, side, trials, small_s, large_s = 1 << 20, 1024, 3, 0.02, 0.02
        sizes = []
    else:
        n, side, trials, small_s, large_s = 1 << 24, 4096, 7, 0.1, 0.15
        sizes = [256, 4096, 1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 20, 1 << 22]
    info = machine_info()
    print(f"benchmarking ({'quick' if args.quick else 'full'} run) ...", file=sys.stderr)
    small = run_small(trials, small_s)
    large = run_large(n, side, trials, large_s)
    sweep = run_sweep(sizes, trials, small_s / 2) if sizes else []
    info["load_average_1m_end"] = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    text = report(info, small, large, sweep)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"info": info, "quick": args.quick, "small": small, "large": large, "sweep": sweep}, f,
                      indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
