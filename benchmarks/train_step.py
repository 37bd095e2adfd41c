"""Time one training step of four small models in minidl beside PyTorch (CPU), in the same run.

A *step* is forward + loss + ``zero_grad`` + backward + ``optimizer.step`` on one synthetic batch
(random data from a fixed seed, the same numbers for both libraries):

(a) **MLP** 784-512-512-10 with ReLU, batch 128, ``SGD(lr=0.01, momentum=0.9)``, ``cross_entropy``.
    Target: minidl / torch time **<= 1.0**.
(b) **LeNet-style CNN** conv(1->32,3)-relu-maxpool2-conv(32->64,3)-relu-maxpool2-
    linear(1600->128)-relu-linear(128->10) on 1x28x28 inputs, batch 64, ``Adam`` (lr 1e-3),
    ``cross_entropy``. Target: minidl / torch time **<= 1.2**.
    **LeNet with BatchNorm** (``lenet_bn``): the same with ``BatchNorm2d`` after each conv, before its ReLU;
    same data, loss and optimizer. Same target.
(c) **Transformer encoder layer** ``TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
    batch_first=True)`` (post-norm, ReLU, dropout 0.1 in training mode) on a batch of 16 sequences of
    64 vectors, ``Adam`` (lr 1e-3), ``mse_loss`` against a fixed random target.
    Target: minidl / torch time **<= 1.3**.

All run with 1 and with 2 threads (``minidl.set_num_threads(n)`` and ``torch.set_num_threads(n)``
before each block). Method: each model is warmed up (this also loads or compiles minidl's Numba
kernels), then timed as rounds of N back-to-back steps, the libraries taking turns round by round;
the reported figure is the **median over rounds** of the per-step mean. The garbage collector
stays on.

**Peak memory.** Each (library, model) pair runs in a fresh subprocess that imports only its own
library: build the model, warm up, ``gc.collect()``, reset the kernel's peak-RSS counter
(``/proc/self/clear_refs`` <- ``5``), read VmRSS, run 20 steps, read VmHWM. That "growth after
warm-up" is shown, but it is ~0 whenever each step reuses what the previous one freed (both
libraries' MLP), so the target is applied to the **peak of training**: a throwaway copy of the
model first takes two steps on a batch of 2 (loading kernels and lazy library state) and is
deleted; then the measured model and batch are built, RSS is read, the peak counter is reset, and warm-up + 20 steps run; peak = highest RSS
- that RSS (gradients, optimizer state, activations, workspace, allocator slack). Where the
counter cannot be reset, ru_maxrss is used. Target: minidl's peak <= 1.3x PyTorch's.

Usage::

    python benchmarks/train_step.py           # full run, about two minutes on 2 cores
    python benchmarks/train_step.py --quick   # smoke run, ~25 s
    python benchmarks/train_step.py --threads 1   # only one thread count
    python benchmarks/train_step.py --profile     # also cProfile minidl's steps and time its kernels
    python benchmarks/train_step.py --models transformer   # only some of the models

The PyTorch columns and the targets are left out when ``import torch`` fails. Keep the machine
idle (see benchmarks/README.md): on a 2-core box a second thread descheduled by another process
makes every parallel kernel wait.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from _bench_common import (add_step_args, fmt_ratio, import_lib, interleaved, kernel_times, libraries, log,
                           log_rounds, memory_child, run_memory_child, set_threads, threading_layer_line, versions)

MLP_TARGET = 1.0
LENET_TARGET = 1.2
TRANSFORMER_TARGET = 1.3
MEM_TARGET = 1.3
MEM_STEPS = 20
SEED = 0

MODELS = {
    "mlp": dict(label="MLP 784-512-512-10, batch 128, SGD(momentum 0.9)", batch=128, target=MLP_TARGET),
    "lenet": dict(label="LeNet CNN 1x28x28, batch 64, Adam", batch=64, target=LENET_TARGET),
    "transformer": dict(label="TransformerEncoderLayer d128 h4 ff512, seq 64, batch 16, Adam", batch=16,
                        target=TRANSFORMER_TARGET),
    "lenet_bn": dict(label="LeNet CNN + BatchNorm 1x28x28, batch 64, Adam", batch=64, target=LENET_TARGET),
}
SEQ, D_MODEL = 64, 128


# ----------------------------------------------------------------------------- models
def build(lib, model: str, batch: int | None = None, device: str = "cpu", capturable: bool = False,
          dropout: float = 0.1, compiled: bool = False):
    """A step closure (model, optimizer, one batch) for ``lib`` (minidl or torch) on ``device``;
    same data for both. ``capturable``: Adam keeps its step count on the device, which torch needs
    to capture the step in a CUDA graph; ``dropout``: the transformer's (the layer's default);
    ``compiled``: the step through ``lib.compile``."""
    nn, F = lib.nn, lib.nn.functional
    lib.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    batch = batch or MODELS[model]["batch"]
    if model == "mlp":
        net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                            nn.Linear(512, 10))
        x = rng.standard_normal((batch, 784), dtype=np.float32)
    elif model == "lenet":
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
        x = rng.standard_normal((batch, 1, 28, 28), dtype=np.float32)
    elif model == "lenet_bn":
        net = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
        x = rng.standard_normal((batch, 1, 28, 28), dtype=np.float32)
    else:
        net = nn.TransformerEncoderLayer(d_model=D_MODEL, nhead=4, dim_feedforward=512, batch_first=True,
                                         dropout=dropout)
        x = rng.standard_normal((batch, SEQ, D_MODEL), dtype=np.float32)
    net.to(device)
    if model == "mlp":
        opt = lib.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = lib.optim.Adam(net.parameters(), lr=1e-3, capturable=capturable)
    if model == "transformer":
        y, loss_fn = rng.standard_normal(x.shape, dtype=np.float32), F.mse_loss
    else:
        y, loss_fn = rng.integers(0, 10, size=batch).astype(np.int64), F.cross_entropy
    xt, yt = lib.from_numpy(x).to(device), lib.from_numpy(y).to(device)

    def step():
        out = net(xt)
        loss = loss_fn(out, yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return lib.compile(step) if compiled else step


# ----------------------------------------------------------------------------- timing
def time_model(libs: dict, model: str, rounds: int, steps: int, warmup: int) -> dict:
    """Median over ``rounds`` of ms/step (mean of ``steps`` steps); libraries alternate by round."""
    return interleaved({name: build(lib, model) for name, lib in libs.items()}, rounds, steps, warmup, model)


# ----------------------------------------------------------------------------- memory
def mem_child(libname: str, model: str, threads: int, warmup: int) -> None:
    """Runs in a subprocess: prints a JSON line with RSS figures in KiB."""
    lib = import_lib(libname)
    lib.set_num_threads(threads)
    res = memory_child(lambda small: build(lib, model, batch=2 if small else None), warmup, MEM_STEPS)
    print(json.dumps(res))


def measure_memory(libnames, model: str, threads: int, warmup: int) -> dict:
    return {name: run_memory_child(__file__, [name, model, threads, warmup]) for name in libnames}


# ----------------------------------------------------------------------------- profile
def profile_minidl(minidl, model: str, steps: int, top: int = 25) -> None:
    import cProfile
    import pstats
    step = build(minidl, model)
    for _ in range(3):
        step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    print(f"\n#### cProfile, minidl {model}, {steps} steps, "
          f"{minidl.get_num_threads()} thread(s) (top {top} by own time)\n\n```")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(top)
    print("```")
    kernel_times(minidl, step, model, steps)


# ----------------------------------------------------------------------------- report
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_step_args(ap, "cProfile minidl's steps too")
    ap.add_argument("--models", nargs="*", choices=list(MODELS), default=list(MODELS))
    args = ap.parse_args()

    if args.mem_child:
        libname, model, threads, warmup = args.mem_child
        mem_child(libname, model, int(threads), int(warmup))
        return

    t0 = time.perf_counter()
    libs = libraries()
    minidl, have_torch = libs["minidl"], "torch" in libs
    models = {name: MODELS[name] for name in args.models}

    if args.quick:
        rounds, warmup, steps = 5, 3, {"mlp": 5, "lenet": 3, "transformer": 3, "lenet_bn": 3}
    else:
        rounds, warmup, steps = 7, 10, {"mlp": 40, "lenet": 12, "transformer": 12, "lenet_bn": 12}

    print("## Training step (minidl vs PyTorch, CPU)\n")
    print(versions(libs))
    print(f"{os.cpu_count()} CPUs; load average at start: {os.getloadavg()[0]:.2f}; "
          f"{rounds} rounds per case, warm-up {warmup} steps"
          + (" (--quick)" if args.quick else "") + "\n")

    verdicts = []
    for n in args.threads:
        set_threads(libs, n)
        print(f"### {n} thread{'s' if n > 1 else ''} (minidl and torch)\n")
        hdr = "| model | steps/round | minidl ms/step |"
        sep = "|---|---:|---:|"
        if have_torch:
            hdr += " torch ms/step | minidl / torch | target | verdict |"
            sep += "---:|---:|---|---|"
        print(hdr)
        print(sep)
        for model, meta in models.items():
            log(f"[{time.perf_counter() - t0:6.1f}s] timing {model}, {n} thread(s)")
            r = time_model(libs, model, rounds, steps[model], warmup)
            row = f"| {meta['label']} | {steps[model]} | {r['minidl']:.2f} |"
            if have_torch:
                ratio = r["minidl"] / r["torch"]
                rs, verdict = fmt_ratio(ratio, meta["target"])
                row += f" {r['torch']:.2f} | {rs} | <= {meta['target']}x | {verdict} |"
                verdicts.append(f"{model} step time, {n} thread(s): {rs} (target <= "
                                f"{meta['target']}x) -> {verdict.strip('*').upper()}")
            print(row, flush=True)
            log_rounds(r, libs)
        print()

    print(threading_layer_line())

    if not args.no_memory:
        mem_threads = max(args.threads)
        print(f"### Peak memory over {MEM_STEPS} steps after warm-up "
              f"({mem_threads} thread{'s' if mem_threads > 1 else ''}, one subprocess each)\n")
        hdr = "| model | minidl peak MiB |"
        sep = "|---|---:|"
        if have_torch:
            hdr += " torch peak MiB | minidl / torch | target | verdict |"
            sep += "---:|---:|---|---|"
        hdr += " minidl growth after warm-up MiB |" + (" torch growth after warm-up MiB |"
                                                       if have_torch else "")
        sep += "---:|" + ("---:|" if have_torch else "")
        print(hdr)
        print(sep)
        notes = []
        for model, meta in models.items():
            log(f"[{time.perf_counter() - t0:6.1f}s] memory {model}")
            m = measure_memory(list(libs), model, mem_threads, warmup)
            w = {k: v["working"] / 1024 for k, v in m.items()}
            g = {k: v["growth"] / 1024 for k, v in m.items()}
            row = f"| {meta['label']} | {w['minidl']:.1f} |"
            if have_torch:
                ratio = w["minidl"] / max(w["torch"], 1e-9)
                rs, verdict = fmt_ratio(ratio, MEM_TARGET)
                row += f" {w['torch']:.1f} | {rs} | <= {MEM_TARGET}x | {verdict} |"
                verdicts.append(f"{model} peak memory of training: {rs} (target <= {MEM_TARGET}x)"
                                f" -> {verdict.strip('*').upper()}")
            row += f" {g['minidl']:.1f} |" + (f" {g['torch']:.1f} |" if have_torch else "")
            print(row, flush=True)
            log("    " + json.dumps(m))
            if not all(v["reset"] for v in m.values()):
                notes.append(f"{model}: peak counter could not be reset; ru_maxrss used")
        print(f"\npeak = highest RSS during warm-up and the {MEM_STEPS} timed steps - RSS once the "
              "model and batch exist (gradients, optimizer state, activations, workspace, "
              f"allocator slack). growth after warm-up = highest RSS during the {MEM_STEPS} steps "
              "- RSS just before them (about 0 when every step reuses memory freed by the last).")
        for note in notes:
            print(f"\nNote: {note}")
        print()

    if verdicts:
        print("### Targets\n")
        for v in verdicts:
            print(f"- {v}")
        print()

    if args.profile:
        minidl.set_num_threads(min(args.threads))   # 1 thread: no parallel-launch noise
        for model in models:
            profile_minidl(minidl, model, 20 if model == "mlp" else 10)

    print(f"load average at end: {os.getloadavg()[0]:.2f}; "
          f"wall time {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
