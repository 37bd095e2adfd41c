"""Time and peak memory of scaled-dot-product attention, forward + backward, in minidl (fused and unfused) beside
PyTorch eager (CPU), in the same run.

Three columns over the same inputs: minidl's ``F.scaled_dot_product_attention`` (the fused kernel, which never
stores the L x S scores), minidl's composition of tensor ops ``F._sdpa_unfused`` with the same arguments, and
``torch.nn.functional.scaled_dot_product_attention`` (its CPU flash attention). Batch 8, 4 heads, head dim 64,
float32, T = L = S = 128, 512 and 1024, non-causal (``--causal``: causal). A *step* is the attention's forward and
its backward for a fixed output gradient, into fresh gradients of q, k and v.

Method as gpt_step.py's: a check first (the three columns' outputs and gradients agree at the first length, batch
1, or the comparison is not honest), then per thread count (1 and 2, set in both libraries) and length: warm-up,
then rounds of N back-to-back steps, the columns taking turns round by round; the figure is the median over rounds
of ms/step. Peak memory of one column's steps in a fresh subprocess each (the highest RSS over a warm-up step and
two steps, less the RSS once the inputs exist). Printed: fused / torch time and fused / unfused peak, against the
issue's targets at T = 1024 (time <= 1.2x torch's, peak <= 1/4 of the unfused path's); the CPU model and versions.

Usage::

    python benchmarks/sdpa.py                       # full run: check, 1 and 2 threads, memory
    python benchmarks/sdpa.py --quick               # smoke run (T = 128 unless --lengths)
    python benchmarks/sdpa.py --causal
    python benchmarks/sdpa.py --profile             # also split the fused step (1 thread) by kernel
    python benchmarks/sdpa.py --lengths 1024 --threads 1 --no-memory
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from _bench_common import (add_step_args, cpu_model, fmt_ratio, import_lib, interleaved, kernel_times, libraries, log,
                           log_rounds, memory_child, run_memory_child, set_threads, threading_layer_line, versions)

BATCH, HEADS, HEAD_DIM = 8, 4, 64
LENGTHS = (128, 512, 1024)
TARGET_LENGTH, TIME_TARGET, MEMORY_TARGET = 1024, 1.2, 0.25
COLUMNS = {"fused": "minidl", "unfused": "minidl", "torch": "torch"}   # column: library
CHECK_TOL = 1e-4
SEED = 0


def attention(column: str, lib):
    """The attention function of ``column``, called as fn(q, k, v, causal)."""
    F = lib.nn.functional
    if column == "unfused":
        return lambda q, k, v, causal: F._sdpa_unfused(q, k, v, None, 0.0, causal, 1.0 / math.sqrt(q.shape[-1]),
                                                       False)
    return lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def arrays(batch: int, length: int) -> list:
    """q, k, v and the output gradient (float32, fixed seed): the same numbers for every column."""
    rng = np.random.default_rng(SEED)
    return [rng.standard_normal((batch, HEADS, length, HEAD_DIM)).astype(np.float32) for _ in range(4)]


def build(column: str, lib, length: int, causal: bool, batch=None):
    """(step closure, its leaves q, k, v): one forward + backward, gradients set to None first. The step
    returns one output element, which interleaved() checks is finite. ``batch`` defaults to BATCH."""
    q, k, v, g = (lib.from_numpy(a) for a in arrays(batch or BATCH, length))
    leaves = [t.requires_grad_() for t in (q, k, v)]
    fn = attention(column, lib)

    def step():
        for t in leaves:
            t.grad = None
        out = fn(q, k, v, causal)
        out.backward(g)
        return out[0, 0, 0, 0]

    return step, leaves


def check(libs: dict, length: int, causal: bool) -> dict:
    """The largest absolute difference of each column from torch (or from fused, without torch) over the
    output and the three gradients, batch 1."""
    results = {}
    for column, libname in COLUMNS.items():
        if libname in libs:
            lib = libs[libname]
            step, leaves = build(column, lib, length, causal, batch=1)
            q, k, v = leaves
            out = attention(column, lib)(q, k, v, causal)
            step()
            results[column] = [np.asarray(t.detach().numpy(), np.float64) for t in [out] + [x.grad for x in leaves]]
    base = results.get("torch", results["fused"])
    return {c: max(float(np.abs(a - b).max()) for a, b in zip(r, base)) for c, r in results.items()}


def run_check(libs: dict, length: int, causal: bool) -> None:
    worst = check(libs, length, causal)
    against = "torch" if "torch" in libs else "fused"
    print(f"Check (T = {length}, batch 1: output and gradients, largest absolute difference from {against}; must be "
          f"<= {CHECK_TOL:g}): " + ", ".join(f"{c} {d:.1e}" for c, d in worst.items()) + "\n")
    bad = {c: d for c, d in worst.items() if not d <= CHECK_TOL}
    if bad:
        raise SystemExit(f"sdpa: {bad} differ from {against} by more than {CHECK_TOL:g}; the columns do not compute "
                         "the same attention")


def mem_child(column: str, length: int, threads: int, causal: int) -> None:
    lib = import_lib(COLUMNS[column])
    lib.set_num_threads(threads)
    res = memory_child(lambda small: build(column, lib, 16 if small else length, bool(causal))[0], 1, 2)
    print(json.dumps(res))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_step_args(ap, "split minidl's fused step (1 thread) by kernel after the timings")
    ap.add_argument("--causal", action="store_true", help="causal attention (default: not)")
    ap.add_argument("--lengths", type=int, nargs="*", help=f"T = L = S (default {' '.join(map(str, LENGTHS))}; "
                                                              "128 with --quick)")
    args = ap.parse_args(argv)

    if args.mem_child:
        column, length, threads, causal = args.mem_child
        mem_child(column, int(length), int(threads), int(causal))
        return None

    t0 = time.perf_counter()
    libs = libraries()
    columns = [c for c, libname in COLUMNS.items() if libname in libs]
    lengths = args.lengths or ((128,) if args.quick else LENGTHS)
    rounds, warmup = (3, 1) if args.quick else (7, 2)
    what = f"batch {BATCH}, {HEADS} heads, head dim {HEAD_DIM}, float32, {'causal' if args.causal else 'non-causal'}"

    print("## Scaled-dot-product attention, forward + backward (minidl fused, minidl unfused, PyTorch; CPU)\n")
    print(versions(libs))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}; {what}; "
          f"{rounds} rounds per case, warm-up {warmup} steps" + (" (--quick)" if args.quick else "") + "\n")
    set_threads(libs, 1)
    run_check(libs, lengths[0], args.causal)

    verdicts = []
    for n in args.threads:
        set_threads(libs, n)
        print(f"### {n} thread{'s' if n > 1 else ''} (minidl and torch)\n")
        print("| T | steps/round | " + " | ".join(f"{c} ms" for c in columns) +
              (" | fused / torch |" if "torch" in libs else " |") + " fused / unfused |")
        print("|---:|---:|" + "---:|" * (len(columns) + 1 + ("torch" in libs)))
        for length in lengths:
            steps = max(1, (256 // length) ** 2) if not args.quick else 1
            log(f"[{time.perf_counter() - t0:6.1f}s] timing T = {length}, {n} thread(s)")
            r = interleaved({c: build(c, libs[COLUMNS[c]], length, args.causal)[0] for c in columns}, rounds, steps,
                            warmup, f"T = {length}")
            row = f"| {length} | {steps} | " + " | ".join(f"{r[c]:.2f}" for c in columns) + " |"
            if "torch" in libs:
                ratio, verdict = fmt_ratio(r["fused"] / r["torch"], TIME_TARGET)
                row += f" {ratio} |"
                if length == TARGET_LENGTH:
                    verdicts.append(f"T = {length} time, {n} thread{'s' if n > 1 else ''}: fused {ratio} torch's "
                                    f"(target <= {TIME_TARGET}x) -> {verdict.strip('*').upper()}")
            print(row + f" {r['fused'] / r['unfused']:.2f}x |", flush=True)
            log_rounds(r, dict.fromkeys(columns))
        print()
    print(threading_layer_line())

    if not args.no_memory:
        threads = max(args.threads)
        print(f"### Peak memory of forward + backward ({threads} thread{'s' if threads > 1 else ''}, one subprocess "
              "per column and length)\n")
        print("| T | " + " | ".join(f"{c} peak MiB" for c in columns) + " | fused / unfused |")
        print("|---:|" + "---:|" * (len(columns) + 1))
        for length in lengths:
            log(f"[{time.perf_counter() - t0:6.1f}s] memory T = {length}")
            m = {c: run_memory_child(__file__, [c, length, threads, int(args.causal)]) for c in columns}
            w = {c: v["working"] / 1024 for c, v in m.items()}
            ratio, verdict = fmt_ratio(w["fused"] / max(w["unfused"], 1e-9), MEMORY_TARGET)
            print(f"| {length} | " + " | ".join(f"{w[c]:.1f}" for c in columns) + f" | {ratio} |", flush=True)
            log("    " + json.dumps(m))
            if length == TARGET_LENGTH:
                verdicts.append(f"T = {length} peak memory: fused {ratio} the unfused path's (target <= "
                                f"{MEMORY_TARGET}x) -> {verdict.strip('*').upper()}")
        print("\npeak = highest RSS over a warm-up step and two steps - RSS once the inputs exist (the scores and "
              "weights the unfused path stores, gradients, workspace, allocator slack); train_step.py's method.\n")

    if args.profile:
        set_threads(libs, 1)
        for length in lengths:
            kernel_times(libs["minidl"], build("fused", libs["minidl"], length, args.causal)[0], f"fused, T = {length}",
                         steps=3)

    if verdicts:
        print("### Targets\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")
    print(f"load average at end: {os.getloadavg()[0]:.2f}; wall time {time.perf_counter() - t0:.0f} s")
    return None


if __name__ == "__main__":
    sys.exit(main())
