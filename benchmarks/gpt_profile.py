"""gpt_step.py --profile: where minidl's step goes, for the per-op cost work (issue 38).

(a) Kernel time per primitive: the kernel registry wrapped with timers (_bench_common.kernel_times).
(b) Python time per software layer along the call path: cProfile's own time per function, attributed to a layer by the
    function's file. Numba reports each call of a compiled kernel to the profiler under the jitted Python function's
    name, so those entries' own time is the compiled kernels' time; BLAS (numpy.matmul inside the matmul kernel) is
    counted as compiled by its caller. Calls into C functions that cProfile sees (builtins, numpy functions) are
    charged to the layers of their callers. cProfile slows Python calls, so the layers are shown as shares of the
    profiled step and scaled to the unprofiled step time.
(c) Ops per step: kernel launches and autograd nodes (nodes reachable from the loss, leaves' accumulators included),
    beside torch's autograd nodes and ATen ops (a dispatch-mode counter).
"""
from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

from _bench_common import kernel_times

COMPILED = "compiled kernels (Numba, BLAS)"
LAYERS = ["public call (registry wrapper, Tensor methods)", "op (minidl/ops)", "autograd (minidl/autograd)",
          "kernel launch (Python in minidl/kernels)", COMPILED, "foundations (layout, dtypes, formulas, threads)",
          "nn modules and functional", "optimizer", "other minidl", "other (benchmark script, numpy, stdlib)"]
BLAS_CALLERS = {("kernels/cpu/linalg.py", "matmul")}       # own time = numpy.matmul's BLAS call
MEMORY_KERNELS = {"alloc", "from_host", "to_host", "open_shared", "share_memory"}
FOUNDATIONS = ("layout.py", "_layouts.py", "_dtype.py", "_device.py", "threads.py", "_type_info.py", "formulas/")


def compiled_kernels() -> set:
    """(file, line, name) of every Numba kernel, as cProfile keys their calls."""
    from numba.core.dispatcher import Dispatcher
    out = set()
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("minidl.kernels.cpu.jit"):
            for val in vars(mod).values():
                if isinstance(val, Dispatcher):
                    code = val.py_func.__code__
                    out.add((code.co_filename, code.co_firstlineno, code.co_name))
    return out


def layer_of(filename: str, func: str, root: str) -> str:
    if not filename.startswith(root):
        return LAYERS[-1]
    rel = os.path.relpath(filename, root).replace(os.sep, "/")
    if (rel, func) in BLAS_CALLERS:
        return COMPILED
    if rel == "_tensor.py" or (rel == "ops/registry.py" and func in ("call", "method")):
        return LAYERS[0]
    if rel.startswith("ops/") or rel == "_tensor_base.py":
        return LAYERS[1]
    if rel.startswith("autograd/"):
        return LAYERS[2]
    if rel.startswith("kernels/"):
        return LAYERS[3]
    if rel.startswith(FOUNDATIONS):
        return LAYERS[5]
    if rel.startswith("nn/"):
        return LAYERS[6]
    if rel.startswith("optim/"):
        return LAYERS[7]
    return LAYERS[8]


def layer_times(stats: pstats.Stats, root: str):
    """{layer: seconds} and [(seconds, calls, layer, function)] from cProfile's own times; C functions' time is
    charged to their callers' layers in proportion to what each caller spent in them."""
    per_layer = dict.fromkeys(LAYERS, 0.0)
    funcs = []
    compiled = compiled_kernels()
    for key, (_, calls, own, _, callers) in stats.stats.items():
        filename, line, func = key
        if filename == "~":                                  # a C function: charge its callers
            for (cfile, _, cfunc), caller in callers.items():
                per_layer[layer_of(cfile, cfunc, root) if cfile != "~" else LAYERS[-1]] += caller[2]
            continue
        layer = COMPILED if key in compiled else layer_of(filename, func, root)
        per_layer[layer] += own
        where = os.path.relpath(filename, root) if filename.startswith(root) else os.path.basename(filename)
        funcs.append((own, calls, layer, f"{where}:{line}({func})"))
    return per_layer, sorted(funcs, reverse=True)


def graph_nodes(loss) -> int:
    """Autograd nodes reachable from ``loss`` (either library: grad_fn / next_functions)."""
    seen, todo = set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo.extend(edge[0] for edge in node.next_functions if edge is not None)   # minidl: None for no edge
    return len(seen)


def torch_aten_ops(torch, step) -> int:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step()
    return Count.n


def op_counts(libs: dict, size: str, build, totals: dict, steps: int) -> None:
    """Kernel launches and allocations per step (minidl's timed registry), autograd nodes, torch's ATen ops."""
    nodes = {name: graph_nodes(build(lib, size)[0]()) for name, lib in libs.items()}
    torch = libs.get("torch")
    aten = torch_aten_ops(torch, build(torch, size)[0]) if torch is not None else "-"
    allocs = sum(calls for (name, _), (calls, _) in totals.items() if name in MEMORY_KERNELS) / steps
    launches = sum(calls for (name, _), (calls, _) in totals.items() if name not in MEMORY_KERNELS) / steps
    print(f"\n#### Ops per step, {size}\n\n| | minidl | torch |\n|---|---:|---:|")
    print(f"| autograd nodes (reachable from the loss, leaf accumulators included) | {nodes['minidl']} | "
          f"{nodes.get('torch', '-')} |")
    print(f"| compute kernel launches (minidl) / ATen ops, any kind (torch) | {launches:.0f} | {aten} |")
    print(f"| buffer allocations (minidl's alloc kernel) | {allocs:.0f} | |")


def profile(libs: dict, size: str, build, steps: int, top: int = 25) -> None:
    minidl = libs["minidl"]
    import minidl as pkg
    root = os.path.dirname(os.path.abspath(pkg.__file__))
    step, _ = build(minidl, size)
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - start) / steps * 1e3
    print(f"\n### Profile, minidl {size}, 1 thread: {wall:.2f} ms/step unprofiled")
    totals = kernel_times(minidl, step, size, steps)

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    per_layer, funcs = layer_times(pstats.Stats(prof), root)
    total = sum(per_layer.values())
    print(f"\n#### Time per layer (cProfile own time, {total / steps * 1e3:.1f} ms/step profiled; "
          f"scaled to the unprofiled {wall:.2f} ms/step)\n")
    print("| layer | share | ms/step (scaled) |\n|---|---:|---:|")
    for layer in LAYERS:
        share = per_layer[layer] / total
        print(f"| {layer} | {share:.1%} | {share * wall:.2f} |")
    print(f"\n#### Top {top} functions by own time (profiled ms/step)\n\n| function | layer | calls/step | ms/step |"
          "\n|---|---|---:|---:|")
    for own, calls, layer, name in funcs[:top]:
        print(f"| `{name}` | {layer.split(' (')[0]} | {calls / steps:.0f} | {own / steps * 1e3:.3f} |")
    op_counts(libs, size, build, totals, steps)
