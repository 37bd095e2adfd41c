"""Compile every CUDA kernel source once, each in its own process, before a GPU run starts.

A fresh GPU machine has an empty NVRTC cache (CuPy's, in ~/.cupy/kernel_cache), and the largest
sources take tens of seconds each: without this, every test worker and example would compile them
in turn. Compiled here side by side, they are read back from the cache by everything after. On the
simulator (``--sim``) the same sources are compiled by g++ into its own cache. Prints the device and
the CuPy, CUDA and torch versions (as the GPU benchmarks do) and each source's compile time.

    python benchmarks/gpu_warm.py [--sim]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import time

from gpu_ops import banner, setup, torch_cuda


def compile_source(name: str, sim: bool) -> float:
    """Seconds to compile csrc/<name>.cu for the active runtime, as minidl compiles it."""
    setup(sim)
    from minidl.kernels.cuda import runtime
    began = time.perf_counter()
    getter = runtime.get().compile(runtime.source(name))
    module = getattr(getter, "__self__", None)
    if hasattr(module, "compile"):  # a CuPy RawModule compiles at its first use: now
        module.compile()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sim", action="store_true", help="the CUDA simulator's g++ build instead of NVRTC")
    args = parser.parse_args()
    print(banner(setup(args.sim), None if args.sim else torch_cuda()), flush=True)
    from minidl.kernels.cuda import runtime
    names = runtime.kernel_files()
    began = time.perf_counter()
    # spawn: a forked child would inherit the parent's CUDA context, which CUDA does not allow
    with concurrent.futures.ProcessPoolExecutor(len(names), mp_context=multiprocessing.get_context("spawn")) as pool:
        compiling = {pool.submit(compile_source, name, args.sim): name for name in names}
        for done in concurrent.futures.as_completed(compiling):  # each as it finishes: a timeout keeps the log
            print(f"{compiling[done]}.cu: {done.result():.1f} s", flush=True)
    print(f"all {len(names)} sources compiled in {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
