"""Time training steps through ``minidl.compile`` beside eager minidl and PyTorch eager (CPU, one thread), in one run.

The workloads are gpt_step.py's GPT steps (tiny, small) and train_step.py's models (MLP, LeNet, LeNet + BatchNorm,
Transformer layer), built by those scripts' own ``build`` (``compiled=True`` wraps the training step, batch as its
argument, in ``minidl.compile``). Per case:

- a check: three steps compiled and three eager from the same seed and weights must give the same losses (bit for
  bit: a replay runs the kernels the eager step ran), and the compiled step must have replayed, not run eagerly;
- the first call (capture: the eager step run under the recorder), and the second (the first replay);
- ms/step of compiled minidl, eager minidl and torch eager, taking turns round by round (median of rounds, as
  gpt_step.py); the target of issue 42 is the tiny GPT compiled <= 1.0x torch eager;
- what a replay spends outside the kernel launches: a call's time minus its launch loop's (guards, input copies,
  outputs), and the launches and host steps per step.

Then the peak memory of training, compiled and eager (for compiled, the capture's peak: a replay allocates
nothing), beside what the graph keeps between calls (its steady state: its intermediates sharing slabs by the
memory plan, the gradients and copies of its arguments it made) and what the plan saved; and the Python that
remains per launch: a chain of 200 elementwise ops on a 1-element tensor, eager (per op) and replayed (per
launch), where the arithmetic itself costs next to nothing.

Usage::

    python benchmarks/compile_step.py            # everything (~3 min on 2 cores)
    python benchmarks/compile_step.py --quick    # smoke run
    python benchmarks/compile_step.py --cases gpt_tiny mlp --no-memory
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _bench_common import (cpu_model, interleaved, libraries, log, log_rounds, memory_child, run_memory_child,
                           versions)

import gpt_step
import train_step

TARGET = 1.0   # tiny GPT, compiled / torch eager
CASES = {   # name -> (label, build(lib, compiled, batch=None) -> step closure)
    "gpt_tiny": ("tiny GPT step (2 x 64, batch 8 x 64)",
                 lambda lib, compiled, batch=None: gpt_step.build(lib, "tiny", batch=batch, compiled=compiled)[0]),
    "gpt_small": ("small GPT step (4 x 128, batch 16 x 128, dropout 0.1)",
                  lambda lib, compiled, batch=None: gpt_step.build(lib, "small", batch=batch, compiled=compiled)[0]),
    "mlp": ("MLP 784-512-512-10, batch 128, SGD",
            lambda lib, compiled, batch=None: train_step.build(lib, "mlp", batch, compiled=compiled)),
    "lenet": ("LeNet, batch 64, Adam",
              lambda lib, compiled, batch=None: train_step.build(lib, "lenet", batch, compiled=compiled)),
    "lenet_bn": ("LeNet + BatchNorm, batch 64, Adam",
                 lambda lib, compiled, batch=None: train_step.build(lib, "lenet_bn", batch, compiled=compiled)),
    "transformer": ("TransformerEncoderLayer d128, batch 16 x 64, Adam",
                    lambda lib, compiled, batch=None: train_step.build(lib, "transformer", batch, compiled=compiled)),
}
MEM_STEPS = 10
STEPS = {"gpt_tiny": 10, "gpt_small": 3, "mlp": 40, "lenet": 12, "lenet_bn": 12, "transformer": 12}


def compiled_function(step):
    """The CompiledFunction behind a step closure of either script."""
    fn = getattr(step, "train", step)
    return fn._minidl_compiled


def check(minidl, case: str) -> list:
    """Three compiled and three eager losses from the same start; they must be equal, and replayed."""
    build = CASES[case][1]
    eager = build(minidl, False)
    losses_eager = [float(eager().item()) for _ in range(3)]
    compiled = build(minidl, True)
    losses_compiled = [float(compiled().item()) for _ in range(3)]
    fn = compiled_function(compiled)
    if losses_compiled != losses_eager:
        raise SystemExit(f"compile_step: {case}: compiled losses {losses_compiled} differ from eager {losses_eager}")
    if not fn.graphs or fn.eager:
        raise SystemExit(f"compile_step: {case}: the compiled step did not replay: breaks {fn.eager}")
    return losses_eager


def first_calls(minidl, case: str) -> tuple:
    """(ms of the first call: capture, ms of the second: the first replay)."""
    step = CASES[case][1](minidl, True)
    times = []
    for _ in range(2):
        start = time.perf_counter()
        step().item()
        times.append((time.perf_counter() - start) * 1e3)
    return tuple(times)


def outside_launches(step, repeats: int) -> tuple:
    """(ms per call, ms in the launch loop alone, launches, host steps) of a compiled step's graph."""
    fn = compiled_function(step)
    graph = next(g for graphs in fn.graphs.values() for g in graphs)
    calls, loops = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        calls.append(time.perf_counter() - start)
        start = time.perf_counter()
        for run, args in graph.steps:
            run(*args)
        loops.append(time.perf_counter() - start)
    host = graph.kinds.count("host")
    launches = len(graph.kinds) - host - graph.kinds.count("grad") - graph.kinds.count("read")
    return statistics.median(calls) * 1e3, statistics.median(loops) * 1e3, launches, host


def mem_child(case: str, compiled: str) -> None:
    """Runs in a subprocess: the peak memory of training (train_step.py's method), as a JSON line."""
    import minidl
    minidl.set_num_threads(1)
    build, kept = CASES[case][1], []

    def make(small):
        step = build(minidl, compiled == "compiled", 2 if small else None)
        if not small:   # (the measured step, kept to read its graph after; the throwaway one is freed)
            kept.append(step)
        return step
    result = memory_child(make, 5, MEM_STEPS)
    if compiled == "compiled":
        graphs = [g for gs in compiled_function(kept[0]).graphs.values() for g in gs]
        result.update(held=sum(g.held_bytes for g in graphs) / 1024, saved=sum(g.saved_bytes for g in graphs) / 1024)
    print(json.dumps(result))


def per_launch(minidl, n_ops: int = 200, repeats: int = 200) -> tuple:
    """(µs per op eagerly, µs per launch replayed) on a chain of elementwise ops over one element."""
    def chain(x):
        for _ in range(n_ops // 2):
            x = x * 1.0001 + 0.5
        return x
    x = minidl.ones(1)
    compiled = minidl.compile(chain)
    compiled(x)
    result = {}
    for name, fn in (("eager", chain), ("replay", compiled)):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn(x)
            samples.append(time.perf_counter() - start)
        result[name] = statistics.median(samples) / n_ops * 1e6
    return result["eager"], result["replay"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--cases", nargs="*", choices=list(CASES), default=list(CASES))
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--mem-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mem_child:
        return mem_child(*args.mem_child)
    t0 = time.perf_counter()
    libs = libraries()
    minidl, torch = libs["minidl"], libs.get("torch")
    for lib in libs.values():
        lib.set_num_threads(1)
    rounds, warmup = (3, 2) if args.quick else (7, 5)

    print("## Compiled training steps (minidl.compile vs eager minidl vs PyTorch eager, CPU, 1 thread)\n")
    print(versions(libs))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}; "
          f"{rounds} rounds per case, warm-up {warmup} steps" + (" (--quick)" if args.quick else "") + "\n")
    print("| step | steps/round | compiled ms | eager ms | torch ms | compiled / torch | eager / torch | "
          "compiled / eager | first call (capture) ms | second call ms | outside launches ms | launches + host "
          "steps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdict = None
    for case in args.cases:
        label, build = CASES[case]
        log(f"[{time.perf_counter() - t0:6.1f}s] {case}: check, first calls")
        check(minidl, case)
        capture_ms, second_ms = first_calls(minidl, case)
        log(f"[{time.perf_counter() - t0:6.1f}s] {case}: timing")
        steps = max(1, STEPS[case] // 3) if args.quick else STEPS[case]
        fns = {"compiled": build(minidl, True), "eager": build(minidl, False)}
        if torch is not None:
            fns["torch"] = build(torch, False)
        r = interleaved(fns, rounds, steps, warmup, case)
        call_ms, loop_ms, launches, host = outside_launches(fns["compiled"], 5 if args.quick else 15)
        t = r.get("torch")
        ratio = (lambda a: f"{r[a] / t:.2f}x") if t else (lambda a: "-")
        print(f"| {label} | {steps} | {r['compiled']:.2f} | {r['eager']:.2f} | {f'{t:.2f}' if t else '-'} | "
              f"{ratio('compiled')} | {ratio('eager')} | {r['compiled'] / r['eager']:.2f}x | {capture_ms:.1f} | "
              f"{second_ms:.1f} | {call_ms - loop_ms:.2f} | {launches} + {host} |", flush=True)
        log_rounds(r, {k: None for k in fns})
        if case == "gpt_tiny" and t:
            met = r["compiled"] / t <= TARGET
            verdict = (f"tiny GPT compiled / torch eager: {r['compiled'] / t:.2f}x (target <= {TARGET}x) -> "
                       f"{'MET' if met else 'MISSED'}")
    if not args.no_memory:
        print(f"\n### Peak memory of training ({MEM_STEPS} steps after warm-up, 1 thread, one subprocess each; "
              f"train_step.py's method)\n")
        print("Peak: the highest RSS above the RSS once the model is built (for compiled, the capture's: the eager "
              "step run while the recorder keeps its buffers; a replay allocates none). Graph holds: the bytes the "
              "graph keeps between calls (its buffers after the memory plan); saved: what the plan saved.\n")
        print("| step | compiled peak MiB | eager peak MiB | compiled / eager | graph holds MiB | plan saved MiB |\n"
              "|---|---:|---:|---:|---:|---:|")
        for case in args.cases:
            log(f"[{time.perf_counter() - t0:6.1f}s] {case}: memory")
            c, e = (run_memory_child(__file__, [case, how]) for how in ("compiled", "eager"))
            print(f"| {CASES[case][0]} | {c['working'] / 1024:.1f} | {e['working'] / 1024:.1f} | "
                  f"{c['working'] / max(e['working'], 1e-9):.2f}x | {c['held'] / 1024:.1f} | {c['saved'] / 1024:.1f} |",
                  flush=True)
    eager_us, replay_us = per_launch(minidl)
    print(f"\nPython per launch (a chain of 200 elementwise ops on one element): eager {eager_us:.1f} µs per op, "
          f"replayed {replay_us:.1f} µs per launch.\n")
    if verdict:
        print(f"### Target\n\n- {verdict}\n")
    print(f"load average at end: {os.getloadavg()[0]:.2f}; wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
