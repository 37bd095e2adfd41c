"""What the step benchmarks (train_step.py, gpt_step.py) share: importing the libraries, setting their
threads, timing step closures in interleaved rounds, peak memory in a fresh subprocess, timing minidl's
kernels, and naming the machine."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def import_lib(name: str):
    """minidl, or torch (None when it cannot be imported: the scripts then leave out its columns)."""
    if name == "torch":
        try:
            import torch
        except Exception:  # noqa: BLE001  (not installed or broken: no torch columns)
            return None
        return torch
    import minidl
    return minidl


def add_step_args(ap, profile_help: str) -> None:
    """The options every step benchmark takes (its own: which models, and so on, it adds itself)."""
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--profile", action="store_true", help=profile_help)
    ap.add_argument("--mem-child", nargs=4, help=argparse.SUPPRESS)


def libraries() -> dict:
    """{"minidl": minidl, "torch": torch}, without torch when it cannot be imported."""
    import minidl
    torch = import_lib("torch")
    return {"minidl": minidl} | ({"torch": torch} if torch is not None else {})


def versions(libs: dict) -> str:
    import platform

    import numba
    torch = libs.get("torch")
    return (f"Python {platform.python_version()}, minidl {libs['minidl'].__version__}, numpy {np.__version__}, "
            f"numba {numba.__version__}" + (f", torch {torch.__version__}" if torch is not None else
                                            ", torch not importable (no torch columns)"))


def log_rounds(r: dict, libs: dict) -> None:
    log("    rounds ms/step: " + "; ".join(f"{k}: " + ", ".join(f"{v:.2f}" for v in r[k + "_all"]) for k in libs))


def set_threads(libs: dict, n: int) -> None:
    for lib in libs.values():
        lib.set_num_threads(n)


def cpu_model() -> str:
    """``lscpu``'s "Model name" (the machine a figure belongs to), or what platform knows."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    import platform
    return platform.processor() or "unknown CPU"


def interleaved(fns: dict, rounds: int, steps: int, warmup: int, label: str) -> dict:
    """Median over ``rounds`` of ms/step (mean of ``steps`` steps) per step closure in ``fns``; the
    closures take turns round by round after ``warmup`` steps each, and must return a finite loss.
    Also ``name + "_all"``: every round's figure."""
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        loss = float(fn().item())
        if not np.isfinite(loss):
            raise RuntimeError(f"{name} {label}: loss is {loss}")
    per = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            per[name].append((time.perf_counter() - start) / steps * 1e3)
    return {name: statistics.median(v) for name, v in per.items()} | {
        name + "_all": v for name, v in per.items()}


# ----------------------------------------------------------------------------- memory
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (``/proc/self/clear_refs`` <- 5, Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") <= _status_kib("VmRSS") + 64


def memory_child(build, warmup: int, steps: int) -> dict:
    """Runs in a fresh subprocess: RSS figures in KiB of training with ``build(small)`` -> step closure.
    A throwaway ``build(True)`` first takes two steps (loading kernels and lazy library state); then the
    measured model is built, RSS read, the peak counter reset, and ``warmup`` + ``steps`` steps run.
    working = highest RSS - RSS once built; growth = highest RSS over the ``steps`` - RSS before them."""
    import gc
    import resource
    rss_import = _status_kib("VmRSS")
    throwaway = build(True)
    for _ in range(2):
        throwaway()
    del throwaway
    gc.collect()
    step = build(False)
    gc.collect()
    rss_built = _status_kib("VmRSS")          # parameters and the batch, no step taken yet
    reset = _reset_peak()
    for _ in range(warmup):
        step()
    gc.collect()
    hwm_warm = _status_kib("VmHWM")
    ru_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    reset = _reset_peak() and reset
    rss_before = _status_kib("VmRSS")
    for _ in range(steps):
        step()
    hwm_steps = _status_kib("VmHWM")
    if reset:
        growth = hwm_steps - rss_before
        working = max(hwm_warm, hwm_steps) - rss_built
    else:                                       # no reset: fall back to ru_maxrss
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - ru_before
        working = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_built
    return dict(growth=growth, working=working, reset=reset, rss_import=rss_import,
                rss_built=rss_built, rss_before=rss_before)


def run_memory_child(script: str, args: list) -> dict:
    """``script --mem-child *args`` in a fresh process; the dict its last stdout line holds as JSON."""
    cmd = [sys.executable, os.path.abspath(script), "--mem-child", *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- kernels
def timed_kernels(minidl, step, steps: int):
    """Each registered CPU kernel wrapped with a timer for ``steps`` steps. Returns (wall ms/step,
    {(kernel, op): (calls, seconds)}), the op being the name a kernel gets (e.g. 'mul')."""
    from minidl import kernels
    kernels.get("alloc", "cpu")                 # the backend registers its kernels on first use
    originals = dict(kernels._registry)
    totals: dict = {}

    def timed(name, fn):
        def run(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                key = (name, next((a for a in args if isinstance(a, str)), ""))
                calls, secs = totals.get(key, (0, 0.0))
                totals[key] = (calls + 1, secs + time.perf_counter() - start)
        return run

    kernels._registry.update({key: timed(key[1], fn) for key, fn in originals.items() if key[0] == "cpu"})
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps * 1e3
    finally:
        kernels._registry.update(originals)
    return wall, totals


def kernel_times(minidl, step, model: str, steps: int, top: int = 20) -> dict:
    """Print where the step's time goes, by kernel and op, and what is left for Python; returns the totals."""
    wall, totals = timed_kernels(minidl, step, steps)
    in_kernels = sum(secs for _, secs in totals.values()) / steps * 1e3
    print(f"\n#### Kernel time, minidl {model}: {wall:.2f} ms/step = {in_kernels:.2f} ms in kernels + "
          f"{wall - in_kernels:.2f} ms outside them (Python, and host work such as drawing random numbers)\n")
    print("| kernel | op | calls/step | ms/step |\n|---|---|---:|---:|")
    for (name, op), (calls, secs) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {name} | {op} | {calls / steps:.0f} | {secs / steps * 1e3:.3f} |")
    return totals


def fmt_ratio(r: float, target: float) -> tuple:
    return f"{r:.2f}x", ("met" if r <= target else "**missed**")


def threading_layer_line() -> str:
    import numba
    try:
        layer = numba.threading_layer()
    except ValueError:          # no parallel kernel launched yet
        layer = "not started"
    return (f"Numba threading layer in use: {layer} (numba.config.THREADING_LAYER = "
            f"{numba.config.THREADING_LAYER!r}, NUMBA_THREADING_LAYER = "
            f"{os.environ.get('NUMBA_THREADING_LAYER', 'unset')})\n")
