"""Time training steps through ``minidl.compile`` beside eager minidl, PyTorch eager and ``torch.compile`` (CPU, one
thread), in one run.

The workloads are gpt_step.py's GPT steps (tiny, small) and train_step.py's models (MLP, LeNet, LeNet + BatchNorm,
Transformer layer), built by those scripts' own ``build`` (``compiled=True`` wraps the training step, batch as its
argument, in ``lib.compile``: ``minidl.compile``, or ``torch.compile`` with its defaults, Inductor). Per case:

- a check: three steps compiled and three eager from the same seed and weights must give the same losses (bit for
  bit: a replay runs the kernels the eager step ran), and the compiled step must have replayed, not run eagerly;
- the same for torch.compile: the whole step (zero_grad, forward, loss, backward, the GPT's clipping, optimizer step) is
  one compiled function; Dynamo splits it where torch itself breaks graphs (``Tensor.backward``, the optimizer's own
  ``graph_break`` around ``step``, a skipped ``zero_grad``), each piece compiled by Inductor and the backward by
  AOTAutograd. Checked: after three calls, two more compile nothing, and torch's profiler sees one call run a
  compiled forward, a compiled backward and at least three Inductor graphs (the optimizer's too); cases without
  dropout must give torch eager's losses to 1e-3 relative (Inductor reorders float arithmetic);
- the first call (capture: the eager step run under the recorder), and the second (the first replay);
- ms/step of compiled minidl, eager minidl, torch eager and torch compiled, taking turns round by round (median
  of rounds, as gpt_step.py); the targets of issue 43: compiled minidl / torch eager <= 0.8 (tiny GPT) and <= 0.9
  (small GPT), with compiled minidl / torch compiled beside them;
- what a replay spends outside the kernel launches: a call's time minus its launch loop's (guards, input copies,
  outputs), and the launches and host steps per step.

First calls of both compilers, each in fresh processes (``--compile-times``; gpt_tiny and gpt_small by default):
"cold" = the first calls in a new process whose on-disk caches are empty (torch: a new TORCHINDUCTOR_CACHE_DIR,
remote caches off; minidl: a new NUMBA_CACHE_DIR and MINIDL_COMPILE_CACHE), "warm" = the same in a second new
process reusing those caches. Reported: import, build (minidl's first kernels compile there too; torch's first
``torch.compile`` imports Dynamo and Inductor), the first three calls (torch may recompile on the second: optimizer
state is made lazily) and the cost of compiling, the first three calls minus three steady steps (a few steps on a
loaded machine: read it to a second or so). torch's cold first call takes a minute or more on 2 cores.

Then the peak memory of training, compiled and eager (for compiled, the capture's peak: a replay allocates
nothing), beside what the graph keeps between calls (its steady state: its intermediates sharing slabs by the
memory plan, the gradients and copies of its arguments it made) and what the plan saved; and the Python that
remains per launch: a chain of 200 elementwise ops on a 1-element tensor, eager (per op) and replayed (per
launch), where the arithmetic itself costs next to nothing.

Usage::

    python benchmarks/compile_step.py            # everything
    python benchmarks/compile_step.py --quick    # smoke run (first calls of the MLP only)
    python benchmarks/compile_step.py --cases gpt_tiny mlp --no-memory
    python benchmarks/compile_step.py --compile-times gpt_tiny gpt_small mlp   # first calls of the MLP too
    python benchmarks/compile_step.py --compile-times                          # no first-call children
    python benchmarks/compile_step.py --no-torch-compile                       # leave torch.compile out
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _bench_common import (cpu_model, import_lib, interleaved, libraries, log, log_rounds, memory_child,
                           run_memory_child, versions)
from _compile_bench import check_torch_compiled, first_calls_child, inductor_works, run_first_calls

import gpt_step
import train_step

TARGETS = {"gpt_tiny": 0.8, "gpt_small": 0.9}   # issue 43: compiled minidl / torch eager
TORCH_RTOL = 1e-3        # torch.compile's losses against torch eager's (cases without dropout)
DROPOUT = {"gpt_small", "transformer"}   # cases whose step draws dropout masks (torch.compile draws its own)
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


def torch_check(torch, case: str, step) -> dict:
    """check_torch_compiled on the step to be timed; for a case without dropout, its losses against torch
    eager's from the same start. Raises when torch did not compile the whole step or computed other losses."""
    res = check_torch_compiled(torch, step)
    if not res["whole"]:
        raise RuntimeError(f"not compiled whole: {res}")
    if case not in DROPOUT:
        eager = CASES[case][1](torch, False)
        expect = [float(eager().item()) for _ in res["losses"]]
        worst = max(abs(a - b) / abs(b) for a, b in zip(res["losses"], expect))
        if not worst <= TORCH_RTOL:
            raise RuntimeError(f"losses {res['losses']} differ from torch eager's {expect} ({worst:.1e} relative)")
        res["worst"] = worst
    return res


def first_calls_main(libname: str, case: str) -> None:
    """Runs in a fresh process (run_first_calls): the first calls of ``case`` compiled by ``libname``, as JSON."""
    print(json.dumps(first_calls_child(lambda: import_lib(libname), lambda lib: CASES[case][1](lib, True))))


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
    ap.add_argument("--no-torch-compile", action="store_true", help="leave the torch.compile column out")
    ap.add_argument("--compile-times", nargs="*", choices=list(CASES), default=None,
                    help="cases whose first calls are timed in fresh processes, cold and warm (default: gpt_tiny "
                         "and gpt_small; with --quick the MLP alone, whose kernels compile fastest; none when given "
                         "no case)")
    ap.add_argument("--mem-child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--first-calls-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mem_child:
        return mem_child(*args.mem_child)
    if args.first_calls_child:
        return first_calls_main(*args.first_calls_child)
    t0 = time.perf_counter()
    libs = libraries()
    minidl, torch = libs["minidl"], libs.get("torch")
    for lib in libs.values():
        lib.set_num_threads(1)
    rounds, warmup = (3, 2) if args.quick else (7, 5)
    no_inductor = "no torch" if torch is None else "--no-torch-compile" if args.no_torch_compile else \
        inductor_works(torch)
    compile_times = args.compile_times
    if compile_times is None:
        compile_times = ([c for c in ["mlp", *args.cases] if c in args.cases][:1] if args.quick else
                         [c for c in ["gpt_tiny", "gpt_small"] if c in args.cases])

    print("## Compiled training steps (minidl.compile vs eager minidl vs PyTorch eager vs torch.compile, CPU, "
          "1 thread)\n")
    print(versions(libs))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}; "
          f"{rounds} rounds per case, warm-up {warmup} steps" + (" (--quick)" if args.quick else "") + "\n")
    if no_inductor:
        print(f"torch.compile left out: {no_inductor}\n")
    print("| step | steps/round | compiled ms | eager ms | torch ms | torch compiled ms | compiled / torch | "
          "compiled / torch compiled | eager / torch | compiled / eager | first call (capture) ms | second call ms "
          "| outside launches ms | launches + host steps |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    verdicts, torch_notes = [], []
    for case in args.cases:
        label, build = CASES[case]
        log(f"[{time.perf_counter() - t0:6.1f}s] {case}: check, first calls")
        check(minidl, case)
        capture_ms, second_ms = first_calls(minidl, case)
        fns = {"compiled": build(minidl, True), "eager": build(minidl, False)}
        if torch is not None:
            fns["torch"] = build(torch, False)
        if not no_inductor:
            log(f"[{time.perf_counter() - t0:6.1f}s] {case}: torch.compile (a cold Inductor cache takes minutes)")
            try:
                step = build(torch, True)
                torch_notes.append((label, torch_check(torch, case, step)))
                fns["torch_compiled"] = step
            except Exception as err:  # noqa: BLE001  (reported in the table; the other columns still count)
                torch_notes.append((label, {"error": f"{type(err).__name__}: {str(err)[:300]}"}))
        log(f"[{time.perf_counter() - t0:6.1f}s] {case}: timing")
        steps = max(1, STEPS[case] // 3) if args.quick else STEPS[case]
        r = interleaved(fns, rounds, steps, warmup, case)
        call_ms, loop_ms, launches, host = outside_launches(fns["compiled"], 5 if args.quick else 15)
        t, tc = r.get("torch"), r.get("torch_compiled")
        ratio = lambda a, b: f"{r[a] / b:.2f}x" if b else "-"  # noqa: E731
        print(f"| {label} | {steps} | {r['compiled']:.2f} | {r['eager']:.2f} | {f'{t:.2f}' if t else '-'} | "
              f"{f'{tc:.2f}' if tc else '-'} | {ratio('compiled', t)} | {ratio('compiled', tc)} | "
              f"{ratio('eager', t)} | {r['compiled'] / r['eager']:.2f}x | {capture_ms:.1f} | {second_ms:.1f} | "
              f"{call_ms - loop_ms:.2f} | {launches} + {host} |", flush=True)
        log_rounds(r, {k: None for k in fns})
        if case in TARGETS and t:
            met = r["compiled"] / t <= TARGETS[case]
            vs_compiled = f"; compiled / torch compiled {r['compiled'] / tc:.2f}x" if tc else ""
            verdicts.append(f"{label}: compiled / torch eager {r['compiled'] / t:.2f}x (target <= {TARGETS[case]}x)"
                            f" -> {'MET' if met else 'MISSED'}{vs_compiled}")
    if torch_notes:
        print_torch_notes(torch_notes)
    if compile_times:
        print_first_calls(compile_times, [] if no_inductor else ["torch"], t0)
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
    if verdicts:
        print("### Targets (issue 43, one thread)\n\n" + "\n".join(f"- {v}" for v in verdicts) + "\n")
    print(f"load average at end: {os.getloadavg()[0]:.2f}; wall time {time.perf_counter() - t0:.0f} s")


def print_torch_notes(notes: list) -> None:
    """How torch.compile ran each step: what one warm call went through, and where Dynamo broke the graph."""
    print("\n### torch.compile of the whole step (default backend, Inductor)\n")
    print("| step | compiled whole | Dynamo graphs | Inductor graphs per call | compiled frames per call | "
          "losses vs torch eager | graph breaks |\n|---|---|---:|---:|---:|---|---|")
    for label, n in notes:
        if "error" in n:
            print(f"| {label} | **no**: {n['error']} | - | - | - | - | - |")
            continue
        losses = f"{n['worst']:.1e} relative" if "worst" in n else "(dropout: not compared)"
        breaks = "; ".join(f"{reason} (x{k})" for reason, k in n["breaks"].items()) or "none"
        print(f"| {label} | yes | {n['graphs']} | {n['inductor_graphs']} | {n['regions']} | {losses} | {breaks} |")


def print_first_calls(cases: list, others: list, t0: float) -> None:
    """First calls of the compiled step in fresh processes, cold then warm, for minidl and ``others``."""
    print("\n### First calls of the compiled step (fresh processes; cold: empty on-disk caches, warm: reusing "
          "them)\n")
    print("| step | library | cache | import s | build s | first call s | second call s | third call s | "
          "compiling s (3 calls - 3 steady steps) | steady ms/step | cache files after |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        for lib in ["minidl", *others]:
            log(f"[{time.perf_counter() - t0:6.1f}s] {case}: first calls of {lib}, cold and warm")
            try:
                res = run_first_calls(__file__, lib, case)
            except Exception as err:  # noqa: BLE001  (a failed child is reported, the rest still runs)
                print(f"| {CASES[case][0]} | {lib} | - | failed: {str(err)[-300:]!r} |")
                continue
            for how, f in res.items():
                print(f"| {CASES[case][0]} | {lib} | {how} | {f['import_s']:.1f} | {f['build_s']:.2f} | "
                      f"{f['first_s']:.2f} | {f['second_s']:.2f} | {f['third_s']:.2f} | {f['to_steady_s']:.2f} | "
                      f"{f['steady_ms']:.1f} | {f['cache_files']} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
