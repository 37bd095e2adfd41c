"""What compile_step.py needs beside minidl.compile: proof that a ``torch.compile``d training step really runs
through Inductor's graphs (not eagerly), and the first calls of either library's compiled step timed in fresh
processes, once with empty on-disk caches ("cold") and once reusing them ("warm")."""
from __future__ import annotations

import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

# ----------------------------------------------------------------------------- torch.compile: did it compile?
FORWARD, BACKWARD = "CompiledFunction", "CompiledFunctionBackward"   # AOTAutograd's forward and backward
REGION, INDUCTOR = "Torch-Compiled Region", "## Call CompiledFxGraph"  # a Dynamo frame, an Inductor graph run


def torch_step_graphs(torch, step) -> dict:
    """What one call of a (warm) torch.compile'd step ran, read from torch's profiler: Dynamo frames entered,
    Inductor graphs called, and whether the forward and the backward were AOTAutograd's compiled ones."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = collections.Counter(e.name for e in prof.events())
    count = lambda prefix: sum(n for name, n in names.items() if name.startswith(prefix))  # noqa: E731
    return dict(regions=count(REGION), inductor_graphs=count(INDUCTOR), forward=names[FORWARD] > 0,
                backward=names[BACKWARD] > 0)


def dynamo_stats(torch) -> dict:
    """Dynamo's running totals: graphs compiled, graph breaks (reason -> count). (Not the frames it could not
    convert: a cold compile counts two generator expressions of Python's own ``inspect`` there, not the step's.)"""
    counters = torch._dynamo.utils.counters
    return dict(graphs=counters["stats"]["unique_graphs"],
                breaks={reason.split("\n")[0]: n for reason, n in counters["graph_break"].items()})


def check_torch_compiled(torch, step, warm_calls: int = 3, more_calls: int = 2) -> dict:
    """Warm a torch.compile'd step up (``warm_calls`` calls: compiles, and the recompiles that lazily made
    optimizer state causes), then check that ``more_calls`` further calls compile nothing more and that one
    call runs a compiled forward, a compiled backward and at least one more Inductor graph (the optimizer's).
    Returns the profile of a call, the graph breaks, the warm-up's losses and ``whole``: whether all that held.
    Dynamo is reset first: the cases share code objects, and their graphs would count against its recompile limit."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    losses = [float(step().item()) for _ in range(warm_calls)]
    before = dynamo_stats(torch)
    for _ in range(more_calls):
        step()
    after = dynamo_stats(torch)
    ran = torch_step_graphs(torch, step)
    whole = (after["graphs"] == before["graphs"] > 0 and ran["forward"] and ran["backward"]
             and ran["inductor_graphs"] >= 3)
    return dict(ran, graphs=after["graphs"], breaks=after["breaks"], recompiled_late=after["graphs"] - before["graphs"],
                losses=losses, whole=whole)


# ----------------------------------------------------------------------------- first calls in fresh processes
def cache_env(lib: str, root: str) -> dict:
    """The environment of a child whose on-disk compile caches all live under ``root`` (empty: a cold
    start; reused: a warm one). torch: Inductor's cache dir, its local FX graph and AOTAutograd caches
    on, every remote cache off. minidl: Numba's kernel cache and MINIDL_COMPILE_CACHE (fused kernels).
    Both: XDG_CACHE_HOME and TMPDIR (torch's default cache dir is under it). The operating system's file
    cache is not cleared: "cold" means no compiled code to reuse, not unread compilers and headers."""
    os.makedirs(os.path.join(root, "tmp"), exist_ok=True)
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(root, "xdg"), TMPDIR=os.path.join(root, "tmp"))
    if lib == "torch":
        env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(root, "inductor"), TORCHINDUCTOR_FX_GRAPH_CACHE="1",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="1", TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="0", TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE="0",
                   TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE="0", TRITON_CACHE_DIR=os.path.join(root, "triton"))
    else:
        env.update(NUMBA_CACHE_DIR=os.path.join(root, "numba"), MINIDL_COMPILE_CACHE=os.path.join(root, "minidl"))
    return env


def files_under(root: str) -> int:
    return sum(len(files) for _, _, files in os.walk(root))


def first_calls_child(import_lib, build, steady_calls: int = 3) -> dict:
    """Runs in a fresh process: import the library, build the compiled step (one thread), call it 3 times
    (the compile, and any recompile), then ``steady_calls`` more. Seconds, and the steady ms/step;
    ``to_steady``: the first 3 calls minus 3 steady steps (the cost of compiling)."""
    start = time.perf_counter()
    lib = import_lib()
    lib.set_num_threads(1)
    imported = time.perf_counter()
    step = build(lib)
    built = time.perf_counter()
    calls = []
    for _ in range(3 + steady_calls):
        t = time.perf_counter()
        loss = float(step().item())
        calls.append(time.perf_counter() - t)
    if not np.isfinite(loss):
        raise RuntimeError(f"first_calls_child: loss is {loss}")
    steady = statistics.median(calls[3:])
    return dict(import_s=imported - start, build_s=built - imported, first_s=calls[0], second_s=calls[1],
                third_s=calls[2], steady_ms=steady * 1e3, to_steady_s=sum(calls[:3]) - 3 * steady)


def run_first_calls(script: str, lib: str, case: str, timeout: float = 1800) -> dict:
    """``script --first-calls-child lib case`` twice in fresh processes sharing one new cache folder: cold
    (empty), then warm. {"cold": figures, "warm": figures}, each with the files the cache held after it."""
    root = tempfile.mkdtemp(prefix=f"compile-cache-{lib}-")
    try:
        out = {}
        for how in ("cold", "warm"):
            cmd = [sys.executable, os.path.abspath(script), "--first-calls-child", lib, case]
            res = subprocess.run(cmd, capture_output=True, text=True, env=cache_env(lib, root), timeout=timeout)
            if res.returncode:
                raise RuntimeError(f"{lib} {case} {how}: child failed:\n{res.stderr[-3000:]}")
            out[how] = json.loads(res.stdout.strip().splitlines()[-1]) | {"cache_files": files_under(root)}
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def inductor_works(torch) -> str | None:
    """None when torch.compile's default backend can compile and run a small function here (it needs a C++
    compiler on CPU); else why not."""
    try:
        fn = torch.compile(lambda x: x * 2.0 + 1.0)
        ok = bool((fn(torch.ones(3)) == 3.0).all())
    except Exception as err:  # noqa: BLE001  (no compiler, broken toolchain: the caller leaves torch.compile out)
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None if ok else "torch.compile computed a wrong result"
